import { href } from '../router.ts';
import { Title } from '../ui.tsx';
import { LiveTail } from './LiveTail.tsx';
import { Triggers, TriggerPage } from './Triggers.tsx';
import { SubscriptionPage, Webhooks } from './Webhooks.tsx';

const TABS: [string, string][] = [
  ['webhooks', 'Webhooks'],
  ['triggers', 'Triggers'],
  ['tail', 'Live tail'],
];

/**
 * `#/events/...` (docs/console.md, docs/events.md): webhook subscriptions and their deliveries
 * (`#/events`, `#/events/webhooks/ID`), triggers and their runs (`#/events/triggers`,
 * `#/events/triggers/ID`), and a live tail of the user's events (`#/events/tail`).
 */
export function Events({ me, segments }: { me: string; segments: string[] }) {
  const [tab = 'webhooks', id] = segments;
  return (
    <>
      <Title>Events</Title>
      <nav aria-label="Events" class="subnav">
        <ul>
          {TABS.map(([path, label]) => (
            <li key={path}>
              <a href={href('events', path)} aria-current={tab === path ? (id ? 'location' : 'page') : undefined}>
                {label}
              </a>
            </li>
          ))}
        </ul>
      </nav>
      {tab === 'webhooks' ? (
        id ? (
          <SubscriptionPage me={me} id={id} />
        ) : (
          <Webhooks me={me} />
        )
      ) : tab === 'triggers' ? (
        id ? (
          <TriggerPage me={me} id={id} />
        ) : (
          <Triggers me={me} />
        )
      ) : tab === 'tail' ? (
        <LiveTail me={me} />
      ) : (
        <p role="alert">
          No such page. <a href={href('events')}>Back to the events</a>
        </p>
      )}
    </>
  );
}
