/**
 * Seeded fault injection for the embedded runtime: simulated crashes at the
 * boundaries between the steps of a batch, and duplicate deliveries. Every fault
 * comes from the seed, so a failing run reproduces from its seed alone.
 */
import { InjectedCrash } from '../errors.ts';

export type CrashPoint = 'before-commit' | 'after-commit' | 'after-deliver' | 'before-ack';

export interface FaultPlanOptions {
  readonly seed: number;
  /** Probability of a crash at each crash point of each batch. Default 0. */
  readonly crashProbability?: number;
  /** Probability that a delivered envelope or sink batch is delivered twice. Default 0. */
  readonly duplicateProbability?: number;
  /** Only crash at these points. Default: all. */
  readonly points?: readonly CrashPoint[];
}

/** Small, fast, seedable PRNG (mulberry32): uniform in [0, 1). */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export class FaultInjector {
  private readonly random: () => number;
  readonly injected: Record<CrashPoint | 'duplicate', number> = {
    'before-commit': 0,
    'after-commit': 0,
    'after-deliver': 0,
    'before-ack': 0,
    duplicate: 0,
  };

  constructor(readonly options: FaultPlanOptions) {
    this.random = mulberry32(options.seed);
  }

  /** Throws InjectedCrash at this point with the plan's probability. */
  maybeCrash(point: CrashPoint): void {
    const p = this.options.crashProbability ?? 0;
    if (p <= 0 || (this.options.points && !this.options.points.includes(point))) return;
    if (this.random() < p) {
      this.injected[point]++;
      throw new InjectedCrash(point);
    }
  }

  /** True when this delivery should happen twice. */
  duplicate(): boolean {
    const p = this.options.duplicateProbability ?? 0;
    if (p <= 0 || this.random() >= p) return false;
    this.injected.duplicate++;
    return true;
  }

  get total(): number {
    return Object.values(this.injected).reduce((a, b) => a + b, 0);
  }
}
