/**
 * How the CLI shows dead letters: one line each with what was parked (the record's value,
 * or the timer or watermark callback), the error and the attempts; and, for `sluice dev`,
 * each new one as it is parked, the first few in full, then a count per refresh.
 */
import type { DeadLetter } from '../transport/envelope.ts';
import { fmt } from './options.ts';

/** Letters shown in full (at the end of `sluice run`, as they come in `sluice dev`). */
export const DEAD_LETTERS_SHOWN = 5;

/** "after 3 attempts, <error>; record {...} at offset 12" */
export function describeDeadLetter(d: DeadLetter): string {
  // The runtime keeps the whole stream record; the user knows their value.
  const r = d.record as { value?: unknown } | undefined;
  const what = d.timer
    ? `${d.timer.domain}-time timer of "${d.timer.operator}" at ${d.timer.time}, key ${truncate(JSON.stringify(d.timer.key))}, namespace ${JSON.stringify(d.timer.namespace)} (consumed)`
    : d.watermark !== undefined
      ? `onWatermark(${d.watermark})`
      : `record ${truncate(JSON.stringify(r && typeof r === 'object' && 'value' in r ? r.value : r))}${d.offset !== undefined ? ` at offset ${d.offset}` : ''}`;
  return `after ${d.attempts} attempts, ${d.error}; ${what}`;
}

/** "12 dead letters" and where they all are, if in a file. */
export function deadLetterCount(n: number, file: string | undefined): string {
  return `${fmt.int(n)} dead letters${file !== undefined && n > 0 ? ` (in ${file})` : ''}`;
}

/** "N late dropped", naming the operators that dropped them. */
export function lateDroppedCount(byOperator: Readonly<Record<string, number>>): string {
  const entries = Object.entries(byOperator).filter(([, n]) => n > 0);
  const total = entries.reduce((t, [, n]) => t + n, 0);
  return `${fmt.int(total)} late dropped${entries.length ? ` (${entries.map(([op, n]) => `${op} ${fmt.int(n)}`).join(', ')})` : ''}`;
}

/** Dead letters as they arrive: the first `shown` in full, later ones as a count per update. */
export class DeadLetterFeed {
  constructor(
    /** Letters there already (a resumed run's, from before its checkpoint): not shown again. */
    private seen = 0,
    private readonly shown = DEAD_LETTERS_SHOWN,
  ) {}

  /** `letters`: all so far, in the order they were parked; the lines to print for those not seen yet. */
  update(letters: readonly DeadLetter[], file?: string): string[] {
    const total = letters.length;
    if (total <= this.seen) return [];
    const lines: string[] = [];
    let i = this.seen;
    for (; i < total && i < this.shown; i++) lines.push(`dead letter: ${describeDeadLetter(letters[i])}`);
    const more = total - i;
    if (more > 0) lines.push(`${fmt.int(more)} more dead letter(s) (only the first ${this.shown} are shown), ${fmt.int(total)} in total${file !== undefined ? `, all in ${file}` : ''}`);
    this.seen = total;
    return lines;
  }
}

function truncate(s: string | undefined, n = 120): string {
  if (s === undefined) return 'undefined';
  return s.length > n ? s.slice(0, n) + '...' : s;
}

/** Events load shedding dropped, over every stream and reason. */
export function shedTotal(shed: Readonly<Record<string, Readonly<Record<string, number>>>>): number {
  let n = 0;
  for (const byReason of Object.values(shed)) for (const c of Object.values(byReason)) n += c;
  return n;
}

/** Add an ingestion answer's shed events to `into` (per stream and reason): a 202 that is not a replay (a replay repeats its first answer). */
export function countShedAnswer(into: Record<string, Record<string, number>>, stream: string, status: number | undefined, body: { shed?: readonly { reason: string }[]; replay?: boolean }): void {
  if (status !== 202 || body.replay) return;
  for (const e of body.shed ?? []) {
    const byReason = (into[stream] ??= {});
    byReason[e.reason] = (byReason[e.reason] ?? 0) + 1;
  }
}
