import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/**
 * A throwaway CA made by openssl in `dir`, and a server certificate for localhost and
 * 127.0.0.1 signed by it: file paths of the CA's certificate and the server's key and certificate.
 */
export function makeCa(dir: string, name: string): { ca: string; key: string; cert: string } {
  const openssl = (...args: string[]) => execFileSync('/usr/bin/openssl', args, { cwd: dir, stdio: 'ignore' });
  openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}-ca.key`, '-out', `${name}-ca.pem`, '-days', '2', '-subj', `/CN=${name} test CA`);
  openssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}-srv.key`, '-out', `${name}-srv.csr`, '-subj', '/CN=localhost');
  fs.writeFileSync(path.join(dir, `${name}-ext.cnf`), 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n');
  openssl('x509', '-req', '-in', `${name}-srv.csr`, '-CA', `${name}-ca.pem`, '-CAkey', `${name}-ca.key`, '-CAcreateserial', '-out', `${name}-srv.pem`, '-days', '2', '-extfile', `${name}-ext.cnf`);
  return { ca: path.join(dir, `${name}-ca.pem`), key: path.join(dir, `${name}-srv.key`), cert: path.join(dir, `${name}-srv.pem`) };
}

/** A client certificate `name` signed by the CA makeCa(dir, ca) made: file paths of its key and certificate. */
export function makeClientCert(dir: string, ca: string, name: string): { key: string; cert: string } {
  const openssl = (...args: string[]) => execFileSync('/usr/bin/openssl', args, { cwd: dir, stdio: 'ignore' });
  openssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`);
  fs.writeFileSync(path.join(dir, `${name}-ext.cnf`), 'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n');
  openssl('x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}-ca.pem`, '-CAkey', `${ca}-ca.key`, '-CAcreateserial', '-out', `${name}.pem`, '-days', '2', '-extfile', `${name}-ext.cnf`);
  return { key: path.join(dir, `${name}.key`), cert: path.join(dir, `${name}.pem`) };
}
