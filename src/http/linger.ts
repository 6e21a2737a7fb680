import type { Socket } from 'node:net';

/** Longest a closing connection keeps reading what its client still sends, in all... */
export const LINGER_MS = 5_000;
/** ...and with nothing arriving (as nginx's lingering_time and lingering_timeout). */
export const LINGER_IDLE_MS = 1_000;

/**
 * Lingering close, for one HTTP server's connections (`onConnection` on its 'connection' event).
 *
 * Node closes a connection it answered with `Connection: close` as soon as the answer is
 * written. If the client is still sending a body the server refused (a 413 for an upload over the
 * limit, a 401 or 404 before the body was read), closing with unread bytes makes the kernel send
 * a TCP reset, and a reset makes the client's side (or a load balancer between the two) throw
 * away the answer before it is read: the client sees "connection reset" instead of the 413. So
 * the server ends its side, then reads and discards what still comes, until the client closes
 * its side, nothing has come for LINGER_IDLE_MS, or LINGER_MS have passed.
 */
export class Lingering {
  private readonly sockets = new Set<Socket>();
  private stopping = false;

  readonly onConnection = (socket: Socket): void => {
    const sockets = this.sockets;
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- the socket's method needs both
    const self = this;
    const plain = socket.destroySoon.bind(socket);
    socket.destroySoon = function (this: Socket) {
      if (self.stopping) return plain();
      if (this.writable) this.end();
      if (this.destroyed) return;
      sockets.add(this);
      // The HTTP parser stops here: what still comes is the refused body, read only to be dropped.
      this.removeAllListeners('data');
      let idle: NodeJS.Timeout | undefined;
      const close = () => {
        clearTimeout(idle);
        clearTimeout(total);
        sockets.delete(this);
        this.destroy();
      };
      const total = setTimeout(close, LINGER_MS).unref();
      const rearm = () => {
        clearTimeout(idle);
        idle = setTimeout(close, LINGER_IDLE_MS).unref();
      };
      rearm();
      this.on('data', rearm);
      this.once('end', close);
      this.once('close', close);
      this.resume();
      // Node's HTTP parser may have stopped the socket's reads itself (a body arriving faster
      // than it was consumed), below what resume() restarts: start them again, or nothing is
      // read and the close is the reset this is here to avoid (test/linger.test.ts holds it to that).
      const handle = (this as unknown as { _handle?: { reading?: boolean; readStart?: () => number } })._handle;
      if (handle?.readStart && !handle.reading) {
        handle.reading = true;
        handle.readStart();
      }
    };
  };

  /** The server is stopping: lingering connections close now, and no more linger, rather than hold the stop. */
  closeAll(): void {
    this.stopping = true;
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
  }
}
