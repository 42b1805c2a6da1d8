/**
 * The checkpoint coordinator at zero traffic (checkpoint-steps.ts calls these): what the
 * open step does when no input arrived since the last committed epoch, and the probe step
 * after a timers wait.
 *
 *   idle    release the lease, then look for input again (input that arrived meanwhile
 *           either saw the lease free and started an execution, or is seen here: go on);
 *           still none: event-time timers pending in the last committed epoch's acks ->
 *           'timers' with the wait (checkpoint-timers.ts), else 'end': the execution
 *           ends and nothing runs until input wakes the coordinator (checkpoint-wakeup.ts)
 *   probe   after the wait: take the lease again (another execution holding it, woken by
 *           input meanwhile: 'end'), probe every source partition, then open an epoch
 *           that carries the probes through; its acks decide the next wait
 */
import type { Ack, CoordinatorState, Participant } from '../../checkpoint/protocol.ts';
import type { PointerStore } from '../../checkpoint/storage.ts';
import { type TimerWakeUpConfig, wakeUpWaitSeconds } from './checkpoint-timers.ts';
import { acquireLease, type Carry, LEASE_NAME, type Lease, type Limits, updateLease } from './checkpoint-task.ts';

export interface AckSource {
  get(epoch: number, participants: readonly { stage: number; partition: number }[]): Promise<Ack[]>;
  lastActivity(): Promise<number | undefined>;
}

/** Wake-ups for event-time timers at zero traffic: the wait's bounds, and the probes into every source partition at `at`. */
export type TimerWakeUp = TimerWakeUpConfig & { sendProbes(at: number): Promise<void> };

export interface IdleContext {
  readonly pointers: PointerStore;
  readonly acks: AckSource;
  readonly participants: readonly Pick<Participant, 'stage' | 'partition'>[];
  /** Unset: a job whose sources do not advance while idle (timerWakeUpConfig); idle always ends. */
  readonly timerWakeUp?: TimerWakeUp;
}

/** Input the last committed epoch may not cover (the ingest path touches at most once per grain). */
export async function inputSince(acks: AckSource, lease: Lease, limits: Limits): Promise<boolean> {
  const at = await acks.lastActivity();
  return at !== undefined && at + limits.activityGrainMs >= lease.coveredFrom;
}

/** The open step found nothing to checkpoint: carry on ('wait'), wait for timers ('timers'), or end. */
export async function idleNext(o: IdleContext, execution: string, state: CoordinatorState, c: Carry, lease: Lease, limits: Limits): Promise<Carry> {
  await updateLease(o.pointers, execution, (l) => ({ ...l, owner: null, until: 0 }));
  const again = await o.pointers.read<Lease>(LEASE_NAME);
  if (await inputSince(o.acks, again?.value ?? lease, limits)) return { ...c, next: 'wait' };
  const wait = await timersWait(o, state);
  return wait === undefined ? { ...c, next: 'end' } : { ...c, next: 'timers', wait };
}

/** Seconds to wait for pending event-time timers, from the last committed epoch's acks; undefined: none (or no wake-ups). */
export async function timersWait(o: IdleContext, state: CoordinatorState): Promise<number | undefined> {
  const last = state.lastCompleted;
  if (!o.timerWakeUp || !last) return undefined;
  return wakeUpWaitSeconds(await o.acks.get(last.epoch, o.participants), o.timerWakeUp);
}

/** After a timers wait: take the lease, probe every source partition, then `open` (an epoch carries the probes through). */
export async function probeStep(o: IdleContext, execution: string, c: Carry, limits: Limits, now: number, open: () => Promise<Carry>): Promise<Carry> {
  const w = o.timerWakeUp;
  if (!w) return { ...c, next: 'wait' };
  const lease = await acquireLease(o.pointers, execution, c.parent, now, limits.leaseMs);
  if (!lease.ok) return { ...c, next: 'end' };
  await w.sendProbes(now);
  return open();
}
