/**
 * What survives a young-generation collection in one query's runtime (no floor):
 *
 *   node --expose-gc --import tsx bench/survivors.ts --query q5 [--events 1000000] [--pulls 40] [--runs 2] [--top 30]
 *
 * The GC share of a stateful query's CPU is mostly the copying of objects that outlive a
 * scavenge (a scavenge's cost follows what survives, not what was allocated): per-key
 * objects that live as long as the key, and objects a cache or a queue holds a little too
 * long. This samples allocations (V8's sampling heap profiler, every 1 KB) over windows of
 * `--pulls` source pulls in the middle of the runs, ends each window with a forced minor GC,
 * and reports what is still there: bytes per window by allocating function and its two
 * callers. Objects in flight at the window's end count too (a real scavenge sees them as
 * well). It is how Q5's sender routes were found to be promoted.
 */
import { Session } from 'node:inspector';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { CollectSink } from '../lib/api/sinks.ts';
import { openCheckpointedRuntime } from '../lib/local/checkpointing.ts';
import { generate } from './nexmark/measure.ts';
import { QUERIES } from './nexmark/queries.ts';
import { intOption } from './flags.ts';

const { values } = parseArgs({
  options: {
    query: { type: 'string', default: 'q5' },
    events: { type: 'string', default: '1000000' },
    pulls: { type: 'string', default: '40' },
    runs: { type: 'string', default: '2' },
    top: { type: 'string', default: '30' },
  },
});
const gc = (globalThis as { gc?: (o: { type: 'minor' }) => void }).gc;
if (!gc) throw new Error('run with node --expose-gc (see the usage at the top of bench/survivors.ts)');
const q = QUERIES.find((x) => x.name === values.query);
if (!q) throw new Error(`--query: one of ${QUERIES.map((x) => x.name).join(', ')}, received "${values.query}"`);
const window = intOption('pulls', values.pulls, 1);
const events = generate(intOption('events', values.events, 1), 42);

interface HeapNode {
  callFrame: { functionName: string; url: string };
  selfSize: number;
  children: HeapNode[];
}

const session = new Session();
session.connect();
/** Same-thread inspector calls complete before post() returns. */
const post = <T>(method: string, params: object = {}): T => {
  let out: T | undefined;
  let error: Error | null = null;
  session.post(method, params, (e, r) => {
    error = e;
    out = r as T;
  });
  if (error) throw error;
  return out!;
};
post('HeapProfiler.enable');

const totals = new Map<string, number>();
let windows = 0;
let pulls = 0;
let sampling = false;
const name = (n: HeapNode) => `${n.callFrame.functionName || '(anonymous)'} ${n.callFrame.url.split('/').slice(-2).join('/')}`;

/** Called per source pull: a window opens every third `window` pulls (after a warm-up), and closes `window` pulls later. */
function tick(): void {
  pulls++;
  if (pulls < 5 * window) return;
  const phase = pulls % (3 * window);
  if (!sampling && phase === 0) {
    post('HeapProfiler.startSampling', { samplingInterval: 1024 });
    sampling = true;
  } else if (sampling && phase === window) {
    gc!({ type: 'minor' });
    const { profile } = post<{ profile: { head: HeapNode } }>('HeapProfiler.stopSampling');
    sampling = false;
    windows++;
    const visit = (n: HeapNode, callers: string[]) => {
      const where = name(n);
      if (n.selfSize > 0) {
        const k = `${where}  <- ${callers.slice(-2).reverse().join(' <- ')}`;
        totals.set(k, (totals.get(k) ?? 0) + n.selfSize);
      }
      for (const c of n.children) visit(c, [...callers, where.split(' ')[0]]);
    };
    visit(profile.head, []);
  }
}

const source = {
  kind: 'generator' as const,
  count: events.length,
  generate: (n: number) => events[n],
  generateBatch: (start: number, end: number) => {
    tick();
    return events.slice(start, end);
  },
};
const dir = mkdtempSync(join(tmpdir(), 'sluice-survivors-'));
try {
  for (let r = 0; r < intOption('runs', values.runs, 1); r++) {
    const { runtime } = await openCheckpointedRuntime(q.job(undefined), { sources: { events: source }, sinks: { results: new CollectSink() } }, { dir: join(dir, String(r)), intervalMs: 1000, durable: false, start: 'fresh' });
    await runtime.run();
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
if (windows === 0) throw new Error('no window closed: use more --events or fewer --pulls');
const all = [...totals.values()].reduce((a, b) => a + b, 0);
console.log(`${q.name}: ${windows} windows of ${window} source pulls; ${(all / windows / 1e6).toFixed(2)} MB survive a minor GC per window`);
for (const [k, v] of [...totals].sort((a, b) => b[1] - a[1]).slice(0, intOption('top', values.top, 1))) console.log(`${(v / windows / 1e3).toFixed(0).padStart(7)} KB  ${k}`);
