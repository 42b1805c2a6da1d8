/**
 * The contract between the checkpoint state machine (infra/checkpoint-state-machine.ts)
 * and its Lambda task (functions/checkpoint.ts -> checkpoint-steps.ts): the task input,
 * the small state carried from task to task, the execution lease, and how errors are
 * named for Retry and Catch. Everything else lives in DynamoDB, so payloads stay a few
 * hundred bytes (Step Functions allows 256 KB).
 */
import { SluiceError } from '../../errors.ts';
import type { PointerStore } from '../../checkpoint/storage.ts';

export const ACTIONS = ['resume', 'open', 'inject', 'decide', 'commit', 'abort', 'probe'] as const;
export type Action = (typeof ACTIONS)[number];

/** Where the state machine goes after a task (its Choice states route on it). */
export type Next = 'wait' | 'inject' | 'decide' | 'pending' | 'commit' | 'abort' | 'continue' | 'end' | 'fail' | 'timers';

/** The state carried through an execution (and into its continuation). */
export interface Carry {
  /** Continuations before this execution (0: started by a wake-up). */
  readonly g: number;
  /** Epochs this execution opened (continue as new at limits.maxEpochs). */
  readonly n: number;
  /** Failures caught and recovered since the last commit (the execution fails beyond limits.maxFailures). */
  readonly failures: number;
  /** The execution that handed its lease over (a continuation), or null. */
  readonly parent: string | null;
  readonly next: Next;
  /** The epoch in flight or last handled (0: none). */
  readonly epoch: number;
  /** next = timers: seconds to wait before probing the source partitions (checkpoint-timers.ts). */
  readonly wait?: number;
  /** next = continue: the continuation's name and input. */
  readonly child?: { readonly name: string; readonly input: Carry };
  /** Set by a Catch (ResultPath $.error): the failure the resume step recovers from. */
  readonly error?: { readonly Error?: string; readonly Cause?: string };
}

export interface Limits {
  /** Epochs per execution before continuing as a new one (history stays far below 25,000 events). */
  readonly maxEpochs: number;
  /** Recovered failures in a row before the execution fails (and the alarm fires). */
  readonly maxFailures: number;
  /** How long an execution owns the coordinator without renewing (any open or resume renews). */
  readonly leaseMs: number;
  /** The ingest path touches the activity item at most once per this many ms (checkpoint-acks.ts touch). */
  readonly activityGrainMs: number;
  /** An epoch not fully acknowledged this long after opening is aborted (the coordinator's timeoutMs). */
  readonly epochTimeoutMs: number;
}

export interface TaskInput {
  readonly action: Action;
  /** $$.Execution.Name: the lease owner. */
  readonly execution: string;
  readonly carry: Partial<Carry>;
  readonly limits: Limits;
}

/** The default activity grain (limits.activityGrainMs): the ingest path's wake-up slot. */
export const DEFAULT_ACTIVITY_GRAIN_MS = 10_000;

export const INITIAL_CARRY: Carry = { g: 0, n: 0, failures: 0, parent: null, next: 'wait', epoch: 0 };

/** A task input the state machine would never send. */
export class CheckpointTaskInputError extends SluiceError {
  readonly code = 'CHECKPOINT_TASK_INPUT';
  readonly retryable = false;
  constructor(
    readonly field: string,
    readonly expected: string,
    readonly received: string,
  ) {
    super(`checkpoint task ${field}: expected ${expected}, received ${received}`);
  }
}

/** An action that needs the coordinator record found none: the resume step creates it. */
export class CoordinatorNotStartedError extends SluiceError {
  readonly code = 'CHECKPOINT_COORDINATOR_NOT_STARTED';
  readonly retryable = false;
  constructor(readonly job: string) {
    super(`job "${job}": no coordinator record; the resume step must run first`);
  }
}

/** Error names the state machine's Retry and Catch match (Lambda reports `name` as the error type). */
export const TASK_ERRORS = { retryable: 'Sluice.Retryable', fatal: 'Sluice.Fatal' } as const;

/** The error a failed task throws: retryable SluiceErrors and unknown errors (SDK, network) retry in place; the rest go to the Catch. */
export function taskError(e: unknown): Error {
  const retryable = !(e instanceof SluiceError) || e.retryable;
  const code = e instanceof SluiceError ? e.code : ((e as { name?: string })?.name ?? 'Error');
  const err = new Error(`${code}: ${(e as Error)?.message ?? String(e)}`, { cause: e });
  err.name = retryable ? TASK_ERRORS.retryable : TASK_ERRORS.fatal;
  return err;
}

const int = (v: unknown, min: number) => typeof v === 'number' && Number.isInteger(v) && v >= min;

export function checkTaskInput(input: unknown): TaskInput & { carry: Carry } {
  const i = input as Partial<TaskInput> | null;
  const show = (v: unknown) => JSON.stringify(v)?.slice(0, 120) ?? String(v);
  if (!i || typeof i !== 'object') throw new CheckpointTaskInputError('input', 'an object with action, execution, carry and limits', show(input));
  if (!ACTIONS.includes(i.action as Action)) throw new CheckpointTaskInputError('action', ACTIONS.join(' | '), show(i.action));
  if (typeof i.execution !== 'string' || !i.execution) throw new CheckpointTaskInputError('execution', 'the execution name ($$.Execution.Name)', show(i.execution));
  const l = i.limits as Partial<Limits> | undefined;
  if (!l || !int(l.maxEpochs, 1) || !int(l.maxFailures, 0) || !int(l.leaseMs, 1) || !int(l.activityGrainMs, 0) || !int(l.epochTimeoutMs, 1)) {
    throw new CheckpointTaskInputError('limits', 'integers maxEpochs >= 1, maxFailures >= 0, leaseMs >= 1, activityGrainMs >= 0, epochTimeoutMs >= 1', show(l));
  }
  const c = { ...INITIAL_CARRY, ...(i.carry ?? {}) };
  for (const k of ['g', 'n', 'failures', 'epoch'] as const) if (!int(c[k], 0)) throw new CheckpointTaskInputError(`carry.${k}`, 'an integer >= 0', show(c[k]));
  if (c.parent !== null && typeof c.parent !== 'string') throw new CheckpointTaskInputError('carry.parent', 'an execution name or null', show(c.parent));
  return { action: i.action as Action, execution: i.execution, carry: c, limits: l as Limits };
}

// ---- the execution lease -----------------------------------------------------------------

export const LEASE_NAME = 'execution';

/** Which execution runs the coordinator; a second one (a duplicate wake-up) ends at its first step. */
export interface Lease {
  readonly owner: string | null;
  readonly until: number;
  /** When the last committed epoch opened: input seen before it (minus the grain) is covered. */
  readonly coveredFrom: number;
}

export type LeaseResult = { readonly ok: true; readonly lease: Lease; readonly version: number } | { readonly ok: false; readonly lease: Lease };

/**
 * Take or renew the lease for `execution`: allowed when it is ours, free, expired, or held
 * by our parent (a continuation takes over). Compare-and-set: of two racing executions one wins.
 */
export async function acquireLease(pointers: PointerStore, execution: string, parent: string | null, now: number, leaseMs: number): Promise<LeaseResult> {
  for (let attempt = 0; ; attempt++) {
    const cur = await pointers.read<Lease>(LEASE_NAME);
    const lease = cur?.value ?? { owner: null, until: 0, coveredFrom: 0 };
    const mine = lease.owner === execution || (parent !== null && lease.owner === parent) || lease.owner === null || lease.until <= now;
    if (!mine) return { ok: false, lease };
    const next = { ...lease, owner: execution, until: now + leaseMs };
    if (await pointers.compareAndSet(LEASE_NAME, cur?.version ?? 0, next)) return { ok: true, lease: next, version: (cur?.version ?? 0) + 1 };
    if (attempt === 2) return { ok: false, lease };
  }
}

/** Change our lease (release, or record what a commit covered); false when it is no longer ours. */
export async function updateLease(pointers: PointerStore, execution: string, change: (l: Lease) => Lease): Promise<boolean> {
  const cur = await pointers.read<Lease>(LEASE_NAME);
  if (!cur || cur.value.owner !== execution) return false;
  return pointers.compareAndSet(LEASE_NAME, cur.version, change(cur.value));
}

/** The continuation's execution name: `<root>-g<generation>`, within Step Functions' 80 characters. */
export function childName(execution: string, g: number): string {
  const root = execution.replace(/-g\d+$/, '');
  const suffix = `-g${g + 1}`;
  return root.slice(0, 80 - suffix.length) + suffix;
}
