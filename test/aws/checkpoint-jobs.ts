/** A small stateful job and its input for the checkpoint tests (local-AWS, and the embedded CLI in test/cli/checkpoints.test.ts). */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Sinks } from '../../lib/api/sinks.ts';
import { mapState, valueState } from '../../lib/api/state.ts';
import { Job } from '../../lib/api/stream.ts';
import { WatermarkStrategies } from '../../lib/api/types.ts';

interface Ev {
  user: string;
  amount: number;
  t: number;
}

/**
 * Per user: a sum per second of event time (timers) and a final total (value state).
 * Changes a savepoint does not fit: `renamedState` keeps the total under another state
 * name; `totalKind: 'map'` declares it as map state (and leaves it empty).
 */
export function countsJob(p: { name?: string; parallelism?: number; maxParallelism?: number; renamedState?: boolean; totalKind?: 'value' | 'map' } = {}): Job {
  const job = new Job(p.name ?? 'counts', { parallelism: p.parallelism ?? 2, maxParallelism: p.maxParallelism ?? 8 });
  const totalName = p.renamedState ? 'grandTotal' : 'total';
  const asMap = p.totalKind === 'map';
  const total = (s: Record<string, unknown>) => s[totalName] as ReturnType<typeof valueState<number>> & { get(): number | undefined; set(v: number): void };
  job
    .ingest<Ev>('events', { timestamp: (e) => e.t, watermark: WatermarkStrategies.boundedOutOfOrderness(100) })
    .keyBy((e) => e.user)
    .process({
      state: { [totalName]: asMap ? mapState<string, number>() : valueState<number>(), perSecond: mapState<number, number>() } as { total: ReturnType<typeof valueState<number>>; perSecond: ReturnType<typeof mapState<number, number>> },
      processElement(e, ctx) {
        const s = ctx.state;
        const second = Math.floor(e.t / 1000);
        s.perSecond.set(second, (s.perSecond.get(second) ?? 0) + e.amount);
        ctx.timers.registerEventTimeTimer(second * 1000 + 999);
        ctx.timers.registerEventTimeTimer(Number.MAX_SAFE_INTEGER);
        if (!asMap) total(s).set((total(s).get() ?? 0) + e.amount);
      },
      onTimer(t, ctx) {
        const s = ctx.state;
        if (t === Number.MAX_SAFE_INTEGER) return ctx.emit({ user: ctx.key, total: asMap ? undefined : total(s).get() });
        const second = Math.floor(t / 1000);
        ctx.emit({ user: ctx.key, second, sum: s.perSecond.get(second) });
        s.perSecond.delete(second);
      },
    })
    .name('per-user')
    .sinkTo(Sinks.stdout(), 'out');
  return job;
}

/** `n` events of 50 users, 3 ms apart in event time. */
export function eventsFile(dir: string, name: string, n: number): string {
  const path = join(dir, name);
  const lines = Array.from({ length: n }, (_, i) => JSON.stringify({ user: `u${(i * 7919) % 50}`, amount: (i * 31) % 97, t: 1_700_000_000_000 + i * 3 }));
  writeFileSync(path, lines.join('\n') + '\n');
  return path;
}
