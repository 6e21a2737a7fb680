/**
 * Text a client sends must be well-formed UTF-16 to be stored or answered faithfully. JSON's
 * `\ud800` escapes can make a string holding a lone surrogate (half of a pair, alone), which
 * UTF-8 cannot carry: stored, it comes back as U+FFFD; given to encodeURIComponent, it throws.
 * (With the `u` flag a pair is one code point, so `\p{Cs}` matches only a lone half.)
 */
const LONE_SURROGATE = /\p{Cs}/u;

/** Does `s` hold no lone surrogate? (`String.prototype.isWellFormed`, outside TypeScript's ES2023 lib.) */
export function isWellFormed(s: string): boolean {
  return !LONE_SURROGATE.test(s);
}

/** The end of a message refusing such a string: why, and what to send instead. */
export const NOT_WELL_FORMED = 'holds a lone surrogate (an unpaired \\ud800-\\udfff escape), which is not text: send the characters themselves, or both halves of a surrogate pair';
