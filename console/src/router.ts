/**
 * Routes live in the address's fragment (`#/algorithms/demo/Hello`): the server serves one page
 * at `/`, and no console address can collide with an API path.
 */
import { useEffect, useState } from 'preact/hooks';

export type Route = string[];

export function parseRoute(hash: string): Route {
  const path = hash.replace(/^#\/?/, '').split('?')[0]!;
  if (path === '') return [];
  try {
    return path.split('/').map((s) => decodeURIComponent(s));
  } catch {
    return ['not-found']; // a malformed %-escape typed into the address: no such page
  }
}

export function href(...segments: string[]): string {
  return '#/' + segments.map(encodeURIComponent).join('/');
}

export function navigate(...segments: string[]): void {
  location.hash = href(...segments);
}

export function useRoute(): Route {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const changed = () => setHash(location.hash);
    addEventListener('hashchange', changed);
    return () => removeEventListener('hashchange', changed);
  }, []);
  return parseRoute(hash);
}
