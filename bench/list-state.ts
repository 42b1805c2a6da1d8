/**
 * A key's list state over many small batches: one key, N events, one source event per
 * batch (a slow stream: each event commits on its own), every event appended to the key's
 * ListState, the list emitted once at the end; without a TTL, then with one (an hour);
 * then the same events buffered by a process window function (one tumbling hour; an hour
 * sliding by ten minutes, so each event is appended to six windows' lists; sessions with
 * an hour of gap, so one session; the same with a minute of allowed lateness, which keeps
 * sessions in another operator).
 * What it measures is the cost of an append as the list grows: it should stay flat (the
 * in-memory store extends a list that only appends made in place; a copy of the list per
 * batch, or per add with a TTL, made it grow with the list, so the run's time grew with N
 * squared).
 *
 *   npx tsx bench/list-state.ts [--events 10000,20000,40000]
 */
import { parseArgs } from 'node:util';
import { Job, listState, runJob, Sinks, Windows } from '../lib/index.ts';

const { values } = parseArgs({ options: { events: { type: 'string', default: '10000,20000,40000' } } });
const sizes = values.events.split(',').map((x) => {
  const n = Number(x);
  if (!Number.isSafeInteger(n) || n < 1) throw new Error(`--events: expected a comma-separated list of integers >= 1, received "${x}"`);
  return n;
});

type Variant = { readonly label: string; readonly ttlMs?: number; readonly window?: 'tumbling' | 'sliding' | 'session'; readonly latenessMs?: number };

async function run(n: number, v: Variant): Promise<number> {
  const job = new Job('list-state', { parallelism: 1 });
  const out = Sinks.collect<number>();
  const keyed = job.fromItems('in', Array.from({ length: n }, (_, i) => ({ i })), { timestamp: (e) => e.i }).keyBy(() => 'k');
  const ttlMs = v.ttlMs;
  if (v.window) {
    let windowed = keyed.window(v.window === 'tumbling' ? Windows.tumbling(3_600_000) : v.window === 'sliding' ? Windows.sliding(3_600_000, 600_000) : Windows.session(3_600_000));
    if (v.latenessMs) windowed = windowed.allowedLateness(v.latenessMs);
    windowed.process<number>((es, _info, o) => o.emit(es.length)).sinkTo(out);
  } else {
    keyed
      .process({
        state: { seen: listState<number>(ttlMs === undefined ? {} : { ttlMs }) },
        processElement(e, ctx) {
          ctx.state.seen.add(e.i);
          ctx.timers.registerEventTimeTimer(Number.MAX_SAFE_INTEGER);
        },
        onTimer(_t, ctx) {
          ctx.emit(ctx.state.seen.get().length);
        },
      })
      .sinkTo(out);
  }
  const cpu0 = process.cpuUsage();
  const { stats } = await runJob(job, { sourceBatchSize: 1 });
  const cpu = process.cpuUsage(cpu0);
  if (out.records.some((x) => x !== n)) throw new Error(`lists of ${out.records.join(', ')} elements after ${n} appends`);
  if (stats.commits < n) throw new Error(`${stats.commits} commits for ${n} events: expected a batch per event`);
  return (cpu.user + cpu.system) / 1000;
}

const variants: Variant[] = [
  { label: 'ListState without TTL' },
  { label: 'ListState with a TTL of an hour', ttlMs: 3_600_000 },
  { label: 'a process window function (tumbling, an hour)', window: 'tumbling' },
  { label: 'a process window function (an hour, sliding by 10 min: each event in 6 windows)', window: 'sliding' },
  { label: 'a process window function (sessions, an hour of gap: one session)', window: 'session' },
  { label: 'the same sessions with a minute of allowed lateness', window: 'session', latenessMs: 60_000 },
];
for (const v of variants) {
  for (let i = 0; i < 3; i++) await run(sizes[0], v); // warm-up (the JIT)
  console.log(v.label);
  console.log('events  CPU ms  µs per event');
  let first: number | undefined;
  for (const n of sizes) {
    const ms = await run(n, v);
    const per = (1000 * ms) / n;
    first ??= per;
    console.log(`${String(n).padStart(6)}  ${ms.toFixed(0).padStart(6)}  ${per.toFixed(1).padStart(6)}  (x${(per / first).toFixed(2)} the first size's)`);
  }
}
