import path from 'node:path';

/**
 * The Content-Type a file is served with, from its name. Clients label uploads unreliably
 * (one labels every body JSON), so what a PUT claimed is not kept; the npm client decides
 * how to parse a download from this header alone, so a wrong guess here breaks it.
 */
const BY_EXTENSION = new Map<string, string>([
  ['.json', 'application/json'],
  ['.txt', 'text/plain; charset=utf-8'],
  ['.text', 'text/plain; charset=utf-8'],
  ['.md', 'text/markdown; charset=utf-8'],
  ['.csv', 'text/csv; charset=utf-8'],
  ['.tsv', 'text/tab-separated-values; charset=utf-8'],
  ['.html', 'text/html; charset=utf-8'],
  ['.xml', 'application/xml'],
  ['.yaml', 'application/yaml'],
  ['.yml', 'application/yaml'],
  ['.js', 'text/javascript; charset=utf-8'],
  ['.py', 'text/x-python; charset=utf-8'],
  ['.png', 'image/png'],
  ['.jpg', 'image/jpeg'],
  ['.jpeg', 'image/jpeg'],
  ['.gif', 'image/gif'],
  ['.webp', 'image/webp'],
  ['.svg', 'image/svg+xml'],
  ['.pdf', 'application/pdf'],
  ['.zip', 'application/zip'],
  ['.gz', 'application/gzip'],
  ['.tar', 'application/x-tar'],
  ['.mp3', 'audio/mpeg'],
  ['.wav', 'audio/wav'],
  ['.mp4', 'video/mp4'],
]);

export function contentTypeFor(name: string): string {
  return BY_EXTENSION.get(path.extname(name).toLowerCase()) ?? 'application/octet-stream';
}

/**
 * The original clients ask for a representation with Accept (getString: text/plain,
 * getJson: application/json, get: application/octet-stream) and parse by the answer's
 * Content-Type; the bytes are the same either way, so an exact Accept of one of these wins.
 */
export function negotiateContentType(accept: string | undefined, stored: string): string {
  switch (accept?.trim().toLowerCase()) {
    case 'text/plain':
      return 'text/plain; charset=utf-8';
    case 'application/json':
      return 'application/json';
    case 'application/octet-stream':
      return 'application/octet-stream';
    default:
      return stored;
  }
}
