/**
 * The ingest function wakes the checkpoint coordinator (infra/checkpoint-state-machine.ts
 * ends its execution at zero traffic). After events were enqueued, per warm container and
 * at most once per time slot of `grainMs`:
 *
 *   1. touch the activity item (DynamoDbAckStore.touch): the running execution sees input;
 *   2. read the lease item (`${job}#c` ptr#execution); when no execution owns it (free or
 *      expired), StartExecution named `<job>-<slot>`: a second container in the same slot
 *      gets ExecutionAlreadyExists, which is success; one from another slot ends at its
 *      first step because the lease is taken.
 *
 * So a busy ingest fleet costs one UpdateItem, one GetItem and at most one StartExecution
 * per container per slot, not per request. The order matters: an execution ending idle
 * releases the lease and then re-reads the activity item, so input that arrives meanwhile
 * is either seen by it or finds the lease free.
 *
 * A failure here never fails the request (the events are already enqueued): the slot is
 * not marked done, so the next request tries again.
 */
import { ExecutionAlreadyExists, type SFNClient, StartExecutionCommand } from '@aws-sdk/client-sfn';
import { ConfigError } from '../../errors.ts';
import type { PointerStore } from '../../checkpoint/storage.ts';
import { type Clock, systemClock } from '../../api/types.ts';
import type { AwsAccounting } from '../cost/accounting.ts';
import { LEASE_NAME, type Lease } from './checkpoint-task.ts';

export interface CoordinatorWakeUpOptions {
  readonly job: string;
  readonly sfn: SFNClient;
  readonly stateMachineArn: string;
  /** The activity item (DynamoDbAckStore). */
  readonly activity: { touch(at: number): Promise<void> };
  /** The coordinator's pointer items (DynamoDbPointerStore), for the lease. */
  readonly pointers: Pick<PointerStore, 'read'>;
  /** The state machine's activity grain (limits.activityGrainMs): one slot. */
  readonly grainMs: number;
  readonly accounting: AwsAccounting;
  readonly clock?: Clock;
}

export interface WakeUpResult {
  readonly touched: boolean;
  /** 'started': a new execution; 'exists': another container started this slot's; 'running': the lease is owned; 'skipped': done earlier in this slot. */
  readonly execution: 'started' | 'exists' | 'running' | 'skipped';
}

/** Step Functions execution names: 1-80 characters of [A-Za-z0-9_-]. */
export function wakeUpExecutionName(job: string, slot: number): string {
  const suffix = `-${slot}`;
  return job.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 80 - suffix.length) + suffix;
}

export class CoordinatorWakeUp {
  private readonly clock: Clock;
  /** The last slot this container handled completely (touch and lease check or start). */
  private doneSlot = -1;
  private touchedSlot = -1;

  constructor(private readonly o: CoordinatorWakeUpOptions) {
    if (!Number.isInteger(o.grainMs) || o.grainMs < 1) throw new ConfigError('wake-up grainMs', 'an integer >= 1 (the state machine activity grain)', String(o.grainMs));
    this.clock = o.clock ?? systemClock;
  }

  /** Input was accepted: make sure the coordinator will see it. */
  async onInput(): Promise<WakeUpResult> {
    const now = this.clock.now();
    const slot = Math.floor(now / this.o.grainMs);
    if (slot <= this.doneSlot) return { touched: false, execution: 'skipped' };
    let touched = false;
    if (slot > this.touchedSlot) {
      await this.o.activity.touch(now);
      this.touchedSlot = slot;
      touched = true;
    }
    const lease = (await this.o.pointers.read<Lease>(LEASE_NAME))?.value;
    if (lease?.owner && lease.until > now) {
      this.doneSlot = slot;
      return { touched, execution: 'running' };
    }
    const name = wakeUpExecutionName(this.o.job, slot);
    try {
      await this.o.sfn.send(new StartExecutionCommand({ stateMachineArn: this.o.stateMachineArn, name, input: '{}' }));
      // One transition: the execution's start (the rest is the coordinator's own, counted there).
      this.o.accounting.record('stepfunctions', 'StartExecution', { requests: 1, items: 1 });
      this.doneSlot = slot;
      return { touched, execution: 'started' };
    } catch (e) {
      if (e instanceof ExecutionAlreadyExists || (e as { name?: string }).name === 'ExecutionAlreadyExists') {
        this.o.accounting.record('stepfunctions', 'StartExecution', { requests: 1, errors: 1 });
        this.doneSlot = slot;
        return { touched, execution: 'exists' };
      }
      this.o.accounting.record('stepfunctions', 'StartExecution', { requests: 1, errors: 1 });
      throw e;
    }
  }
}
