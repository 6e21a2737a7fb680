import { ApiError, type UsageReport, type UserLimits } from '../../../../client/src/index.ts';
import type { Command } from '../context.ts';
import { noMore, parseArgs, resolveUser, table } from './common.ts';

/** A whole number of bytes, as people read it (1000s; the exact number in --json). */
function bytes(n: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB', 'PB'];
  let v = n;
  let i = 0;
  while (v >= 1000 && i < units.length - 1) {
    v /= 1000;
    i++;
  }
  return i === 0 ? `${n} B` : `${v.toFixed(v < 10 ? 2 : 1)} ${units[i]}`;
}

function seconds(s: number): string {
  return `${Math.round(s * 1000) / 1000} s`;
}

/** The limits as lines of a table: what holds, what is used, what is left, and when more comes. */
function limitRows(l: UserLimits | NonNullable<UserLimits['key']>): string[][] {
  const none = 'no limit';
  return [
    ['calls per minute', l.calls_per_min === null ? none : `${l.calls_per_min} (burst ${l.burst})`, '', l.remaining === null ? '' : `${l.remaining} now`, l.reset_s === null ? '' : `full in ${l.reset_s} s`],
    ['calls at once', l.concurrency === null ? none : String(l.concurrency), `${l.in_flight} under way`, l.concurrency === null ? '' : String(Math.max(0, l.concurrency - l.in_flight)), ''],
    [
      'compute this month',
      l.compute.seconds_per_month === null ? none : seconds(l.compute.seconds_per_month),
      seconds(l.compute.used_s),
      l.compute.remaining_s === null ? '' : seconds(l.compute.remaining_s),
      `from ${l.compute.resets_at.slice(0, 10)}`,
    ],
    ['hosted bytes', l.storage.bytes === null ? none : bytes(l.storage.bytes), bytes(l.storage.used_bytes), l.storage.remaining_bytes === null ? '' : bytes(l.storage.remaining_bytes), ''],
    // The user's share of busy workers (a key has none of its own).
    ...('share' in l ? [['share of workers', `${l.share} call${l.share === 1 ? '' : 's'} a turn`, '', '', '']] : []),
  ];
}

export const usage: Command = {
  summary: 'your usage (calls, compute seconds) and your limits and quotas, with what is left',
  usage: `usage: algo usage [--from YYYY-MM-DD] [--to YYYY-MM-DD] [--user NAME]

Your calls and compute seconds (the billing unit) over a range of UTC days, as a caller and
as an owner of algorithms (the last 30 days by default; docs/usage.md), then the limits and
quotas that hold for you and what is left of them: calls per minute, calls at once, compute
seconds this month (UTC; when the count starts again) and hosted bytes stored, and your share
of the workers when they are all busy (docs/limits.md). The key in use may have limits of its
own: they are shown too. Reading usage needs a key that may manage (allow_algo_management);
the limits, any key.
  --from, --to   the range, both days included
  --user NAME    whose (default: the user the API key belongs to)`,

  async run(ctx, argv) {
    const args = parseArgs(argv, { from: { value: true }, to: { value: true }, user: { value: true } });
    noMore(args, 0);
    const user = await resolveUser(ctx, args.string('user'), '--user');
    const client = ctx.client();
    const limits = await client.limits(user);
    let report: UsageReport | null = null;
    let refused: string | undefined;
    try {
      report = await client.usage(user, { from: args.string('from'), to: args.string('to') });
    } catch (err) {
      // A key that may only call still sees its limits.
      if (!(err instanceof ApiError && err.status === 403 && args.string('from') === undefined && args.string('to') === undefined)) throw err;
      refused = err.message;
    }
    ctx.result({ usage: report, limits }, () => {
      const out: string[] = [];
      if (report !== null) {
        const t = (label: string, s: UsageReport['as_caller']) => [label, String(s.total.calls), seconds(s.total.seconds), String(s.total.errors), String(s.total.timeouts)];
        out.push(`Usage of ${report.user}, ${report.from} to ${report.to}:`);
        out.push(table(['', 'CALLS', 'COMPUTE', 'ERRORS', 'TIMEOUTS'], [t('as a caller', report.as_caller), t('as an owner', report.as_owner)]));
      } else {
        out.push(`Usage: not shown (${refused})`);
      }
      out.push('', `Limits of ${user}:`, table(['', 'LIMIT', 'USED', 'LEFT', 'MORE'], limitRows(limits)));
      if (limits.key !== null) out.push('', 'This key\'s own limits (calls with it are held to these and to the above):', table(['', 'LIMIT', 'USED', 'LEFT', 'MORE'], limitRows(limits.key)));
      return out.join('\n');
    });
  },
};
