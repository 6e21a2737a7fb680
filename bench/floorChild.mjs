// The child of the algorithm-call floor (bench/floorServer.ts): run by the system node
// (`/usr/bin/node bench/floorChild.mjs`), it echoes length-prefixed frames (u32 LE length |
// bytes) from stdin to stdout, every frame completed by a chunk answered in one write.
let chunks = [];
let buffered = 0;
process.stdin.on('data', (chunk) => {
  chunks.push(chunk);
  buffered += chunk.length;
  let all = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
  let off = 0;
  while (buffered - off >= 4) {
    const size = 4 + all.readUInt32LE(off);
    if (buffered - off < size) break;
    off += size;
  }
  if (off === 0) {
    chunks = [all];
    return;
  }
  // Complete frames are echoed as they are (prefix included).
  process.stdout.write(all.subarray(0, off));
  all = all.subarray(off);
  chunks = all.length > 0 ? [all] : [];
  buffered = all.length;
});
process.stdin.on('end', () => process.exit(0));
