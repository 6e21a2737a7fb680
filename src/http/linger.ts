import type { Socket } from 'node:net';

/** Longest a closing connection keeps reading what its client still sends, in all... */
export const LINGER_MS = 5_000;
/** ...and with nothing arriving (as nginx's lingering_time and lingering_timeout). */
export const LINGER_IDLE_MS = 1_000;

/**
 * Lingering close. Node closes a connection it answered with `Connection: close` as soon as the
 * answer is written. If the client is still sending a body the server refused (a 413 for an
 * upload over the limit, a 401 or 404 before the body was read), closing with unread bytes makes
 * the kernel send a TCP reset, and a reset makes the client's side (or a load balancer between
 * the two) throw away the answer before it is read: the client sees "connection reset" instead
 * of the 413. So the server ends its side, then reads and discards what still comes, until the
 * client closes its side, nothing has come for LINGER_IDLE_MS, or LINGER_MS have passed.
 */
export function lingerOnClose(socket: Socket): void {
  socket.destroySoon = function (this: Socket) {
    if (this.writable) this.end();
    if (this.destroyed) return;
    // The HTTP parser stops here: what still comes is the refused body, read only to be dropped.
    this.removeAllListeners('data');
    let idle: NodeJS.Timeout;
    const close = () => {
      clearTimeout(idle);
      clearTimeout(total);
      this.destroy();
    };
    const total = setTimeout(close, LINGER_MS);
    const rearm = () => {
      clearTimeout(idle);
      idle = setTimeout(close, LINGER_IDLE_MS);
    };
    rearm();
    this.on('data', rearm);
    this.once('end', close);
    this.once('close', close);
    this.resume();
  };
}
