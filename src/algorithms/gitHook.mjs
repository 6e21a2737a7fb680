// The pre-receive hook of every algorithm's git repository (gitRepos.ts installs it). It runs
// inside `git receive-pack`, under git http-backend, under the server: it hands the pushed
// master to the server over the Unix socket the server made for this push, and prints what the
// server answers, which git shows the pusher as `remote:` lines. Exit 0 lets the push update
// master; anything else refuses it. Plain JavaScript: run by /usr/bin/node without a loader.
import { spawn } from 'node:child_process';
import net from 'node:net';

const ZERO = /^0+$/;

function refuse(message) {
  process.stdout.write(`algohost: ${message}\n`);
  process.exit(1);
}

let input = '';
process.stdin.setEncoding('utf8');
for await (const chunk of process.stdin) input += chunk;
const updates = input
  .split('\n')
  .filter((l) => l.trim() !== '')
  .map((l) => {
    const [oldSha, newSha, ref] = l.trim().split(/\s+/);
    return { oldSha, newSha, ref };
  });

const others = updates.filter((u) => u.ref !== 'refs/heads/master');
if (others.length > 0) {
  refuse(`only master is kept here: it is the algorithm's source. Push to master (git push origin HEAD:master); refused: ${others.map((u) => u.ref).join(', ')}`);
}
const master = updates.find((u) => u.ref === 'refs/heads/master');
if (!master) process.exit(0);
if (ZERO.test(master.newSha)) refuse('master cannot be deleted: it is the algorithm\'s source');

const socketPath = process.env.ALGOHOST_GIT_HOOK_SOCKET;
if (!socketPath) refuse('this push did not come through the server (no hook socket); push over its /git/ address');

// The pushed tree as the same tar.gz a source upload sends (objects still in quarantine are
// visible to this process through the environment receive-pack gave it).
const archive = spawn('git', ['archive', '--format=tar.gz', master.newSha], { stdio: ['ignore', 'pipe', 'inherit'] });
const socket = net.connect(socketPath);
socket.write(`${JSON.stringify({ ref: master.ref, old: master.oldSha, new: master.newSha })}\n`);
archive.stdout.pipe(socket, { end: false });
const archived = new Promise((resolve) => archive.once('close', resolve));

let answer = '';
let code = 1;
socket.setEncoding('utf8');
socket.on('data', (text) => {
  answer += text;
  // Lines as they come: a long build shows progress while the pusher waits.
  let nl;
  while ((nl = answer.indexOf('\n')) >= 0) {
    const line = answer.slice(0, nl);
    answer = answer.slice(nl + 1);
    const exit = /^algohost-exit: (\d+)$/.exec(line);
    if (exit) code = Number(exit[1]);
    else process.stdout.write(`${line}\n`);
  }
});
const status = await archived;
if (status !== 0) refuse(`git archive of ${master.newSha} failed (${status})`);
socket.end();
await new Promise((resolve) => {
  socket.once('close', resolve);
  socket.once('error', (err) => {
    process.stdout.write(`algohost: the server went away during the push (${err.message})\n`);
    resolve();
  });
});
process.exit(code);
