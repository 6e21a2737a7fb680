/**
 * What the Events page shares (docs/events.md): the catalogue of event types for the forms'
 * hints. Subscriptions, triggers and the live stream go through the project's client
 * (`client.subscriptions(me)`, `client.triggers(me)`, `client.events()`), as the signed-in user.
 */

/** The catalogue (docs/events.md). */
export const EVENT_TYPES = [
  'data.file.created',
  'data.file.updated',
  'data.file.deleted',
  'data.directory.created',
  'data.directory.deleted',
  'algorithm.build.succeeded',
  'algorithm.build.failed',
  'algorithm.version.published',
  'call.completed',
  'trigger.failed',
];

/** "data.file.*, call.completed" → the list the API takes (commas or spaces between). */
export function typeList(text: string): string[] {
  return text
    .split(/[\s,]+/)
    .map((s) => s.trim())
    .filter(Boolean);
}
