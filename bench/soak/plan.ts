/**
 * A crash-soak seed's plan, a pure function of the seed: which job, which input, where the
 * child process is killed (a named fault site and its nth crossing, the nth crossing of any
 * site, or a SIGKILL from outside after a number of milliseconds) and how often.
 */
import { faultPoints } from '../../lib/util/fault-sites.ts';
import { mulberry32 } from '../../lib/local/faults.ts';

export const QUERIES = ['q3', 'q4', 'q5', 'q8', 'q11', 'timers'] as const;
export type Query = (typeof QUERIES)[number];

/** Each query's job module. */
export const JOBS: Record<Query, string> = {
  q3: 'examples/nexmark/q3.ts',
  q4: 'examples/nexmark/q4.ts',
  q5: 'examples/nexmark/q5.ts',
  q8: 'examples/nexmark/q8.ts',
  q11: 'examples/nexmark/q11.ts',
  timers: 'bench/soak/timers-job.ts',
};
export type SoakTarget = 'embedded' | 'local-aws';

export type Kill =
  /** SIGKILL from inside at the nth crossing of a named point. */
  | { readonly kind: 'site'; readonly point: string; readonly nth: number }
  /** SIGKILL from inside at the nth crossing of any point. */
  | { readonly kind: 'any'; readonly nth: number }
  /** SIGKILL from the soak driver this many ms after the child started. */
  | { readonly kind: 'timer'; readonly ms: number }
  /** `sluice dev` SIGKILLed while a request is in flight, or between requests. */
  | { readonly kind: 'dev'; readonly when: 'in flight' | 'between requests' };

/** What a soak runs: `sluice run` on a target, or `sluice dev` with a publishing client. */
export type SoakMode = SoakTarget | 'dev';

export interface SeedPlan {
  readonly seed: number;
  readonly target: SoakTarget;
  readonly query: Query;
  /** Generator seed of the input (inputs and their references are shared by seeds). */
  readonly inputSeed: number;
  readonly events: number;
  readonly checkpointIntervalMs: number;
  readonly kills: readonly Kill[];
}

/**
 * Inputs per target: a few, so their references and crossing counts are computed once.
 * The embedded input spans three source chunks (4,096 records each) over 48 s of event
 * time; CI's seeds take CI_EVENTS (one chunk over 8 s: windows of every query still fire),
 * since a child's start costs more than a few thousand events.
 */
export const INPUTS = { embedded: { variants: 3, events: 12_000, ratePerSec: 250 }, 'local-aws': { variants: 2, events: 600, ratePerSec: 1000 } } as const;

/** Events per input of CI's embedded seeds (test/soak/crash-soak.test.ts). */
export const CI_EVENTS = 2_000;

/** Checkpoint interval of the child runs: short, so that kills fall between many epochs. */
export const INTERVAL_MS = { embedded: 5, 'local-aws': 200 } as const;

/** Crossings of each point in an uninterrupted checkpointed run of the seed's job and input (what `nth` is drawn from). */
export type Census = ReadonlyMap<string, number>;

/**
 * The job and input of a seed (drawn first: the kills depend on what that job crosses):
 * seeds take the queries in turn, and each query's seeds its input variants in turn.
 */
export function pickJob(seed: number, target: SoakTarget): { query: Query; inputSeed: number } {
  const round = Math.floor(seed / QUERIES.length);
  return { query: QUERIES[seed % QUERIES.length], inputSeed: round % INPUTS[target].variants };
}

/**
 * The plan of a seed. A query's seeds walk the points its job crosses in turn (its kth
 * seed's first kill is at point k mod their number), so QUERIES.length times that many
 * seeds kill every query at every site it crosses; whether more kills follow (half the
 * seeds: a second, some a third, each after a resume), where, and each kill's crossing,
 * come from the seed's generator.
 */
export function planSeed(seed: number, target: SoakTarget, counts: Census, events: number = INPUTS[target].events): SeedPlan {
  const { query, inputSeed } = pickJob(seed, target);
  const random = mulberry32(seed * 40503 + 17);
  const int = (n: number) => Math.floor(random() * n);
  const points = faultPoints(target === 'embedded' ? 'embedded' : 'aws').filter((p) => (counts.get(p) ?? 0) > 0);
  const anyTotal = [...counts.values()].reduce((a, b) => a + b, 0);
  const site = (point: string): Kill => ({ kind: 'site', point, nth: 1 + int(counts.get(point) ?? 1) });
  const kills: Kill[] = [];
  if (points.length) kills.push(site(points[Math.floor(seed / QUERIES.length) % points.length]));
  const draw = random();
  const more = draw < 0.5 ? 0 : draw < 0.85 ? 1 : 2;
  for (let k = 0; k < more; k++) {
    const r = random();
    if (r < 0.4 && points.length) kills.push(site(points[int(points.length)]));
    else if (r < 0.7) kills.push({ kind: 'any', nth: 1 + int(Math.max(1, anyTotal)) });
    else kills.push({ kind: 'timer', ms: target === 'embedded' ? 100 + int(900) : 2000 + int(15_000) });
  }
  return { seed, target, query, inputSeed, events, checkpointIntervalMs: INTERVAL_MS[target], kills };
}

export function describeKill(k: Kill): string {
  switch (k.kind) {
    case 'timer':
      return `SIGKILL after ${k.ms} ms`;
    case 'any':
      return `SIGKILL at crossing ${k.nth} of any site`;
    case 'site':
      return `SIGKILL at ${k.point} #${k.nth}`;
    case 'dev':
      return `sluice dev SIGKILLed ${k.when}`;
  }
}

/** The kind a report counts a kill under: its site (a site kill), "any site", "timer" or the dev case. */
export function killKind(k: Kill): string {
  switch (k.kind) {
    case 'site':
      return k.point;
    case 'any':
      return 'any site (nth crossing)';
    case 'timer':
      return 'timer (from outside)';
    case 'dev':
      return `sluice dev, ${k.when}`;
  }
}
