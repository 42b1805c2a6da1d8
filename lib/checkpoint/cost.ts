/**
 * The coordinator's share of the bill. A Step Functions Standard transition is billed
 * whether or not an event arrived, so the epoch interval and the loop's shape decide a
 * fixed monthly cost (DESIGN.md "Economics": ~5 transitions per epoch, 1 s epochs about
 * $324 a month, 60 s about $5.40). Epochs run only when input arrived, so the real cost
 * is this times the fraction of intervals with traffic.
 */
import { InvalidCoordinatorInputError } from './errors.ts';

/** Step Functions Standard, us-east-1, $0.025 per 1,000 state transitions (price as of 2025-06). */
export const STEP_FUNCTIONS_PRICE_PER_TRANSITION = 0.000025;
/** Transitions of one epoch in the recommended loop: open, inject, wait, decide, commit. */
export const DEFAULT_TRANSITIONS_PER_EPOCH = 5;
/** Standard workflow execution history limit; a loop continues as a new execution before it. */
export const EXECUTION_HISTORY_LIMIT = 25_000;
/** The cost model's month. */
export const MS_PER_MONTH = 30 * 24 * 3600 * 1000;

export interface LoopShape {
  /** Transitions spent per epoch inside the loop (default 5). */
  readonly perEpoch?: number;
  /** Transitions spent once per execution (start, continue-as-new), shared by its epochs. */
  readonly perExecution?: number;
  /** Epochs run by one execution before it continues as a new one. */
  readonly epochsPerExecution?: number;
}

function positive(field: string, v: number, allowZero = false): number {
  if (!Number.isFinite(v) || v < 0 || (!allowZero && v === 0)) throw new InvalidCoordinatorInputError(field, allowZero ? 'a finite number >= 0' : 'a finite number > 0', String(v));
  return v;
}

/** Average transitions billed per epoch for a loop shape. */
export function transitionsPerEpoch(shape: LoopShape = {}): number {
  const perEpoch = positive('perEpoch', shape.perEpoch ?? DEFAULT_TRANSITIONS_PER_EPOCH, true);
  const perExecution = positive('perExecution', shape.perExecution ?? 0, true);
  const epochs = positive('epochsPerExecution', shape.epochsPerExecution ?? 1);
  return perEpoch + perExecution / epochs;
}

/**
 * Dollars per 30-day month for one job's coordinator at one epoch every `intervalMs`,
 * when a fraction `activeFraction` of the intervals saw input (1: always busy, 0: idle).
 */
export function coordinatorCostPerMonth(
  intervalMs: number,
  pricePerTransition: number = STEP_FUNCTIONS_PRICE_PER_TRANSITION,
  options: { readonly transitionsPerEpoch?: number; readonly activeFraction?: number } = {},
): number {
  positive('intervalMs', intervalMs);
  positive('pricePerTransition', pricePerTransition, true);
  const perEpoch = positive('transitionsPerEpoch', options.transitionsPerEpoch ?? DEFAULT_TRANSITIONS_PER_EPOCH, true);
  const active = positive('activeFraction', options.activeFraction ?? 1, true);
  if (active > 1) throw new InvalidCoordinatorInputError('activeFraction', 'a fraction in [0, 1]', String(active));
  return (MS_PER_MONTH / intervalMs) * active * perEpoch * pricePerTransition;
}

/** The shortest busy-job interval whose coordinator stays within a monthly budget. */
export function minIntervalForBudget(
  budgetPerMonth: number,
  pricePerTransition: number = STEP_FUNCTIONS_PRICE_PER_TRANSITION,
  perEpoch: number = DEFAULT_TRANSITIONS_PER_EPOCH,
): number {
  positive('budgetPerMonth', budgetPerMonth);
  return Math.ceil((MS_PER_MONTH * perEpoch * positive('pricePerTransition', pricePerTransition, true)) / budgetPerMonth);
}

/** Epochs one execution may run before continuing as new, keeping `headroom` of the history limit free. */
export function maxEpochsPerExecution(historyEventsPerEpoch: number, headroom = 0.1): number {
  positive('historyEventsPerEpoch', historyEventsPerEpoch);
  if (!(headroom >= 0 && headroom < 1)) throw new InvalidCoordinatorInputError('headroom', 'a fraction in [0, 1)', String(headroom));
  return Math.max(1, Math.floor((EXECUTION_HISTORY_LIMIT * (1 - headroom)) / historyEventsPerEpoch));
}
