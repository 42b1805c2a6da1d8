/**
 * The checkpoint state machine's loop in process, for local-AWS mode: the same task code
 * (CheckpointSteps, what functions/checkpoint.ts runs for each Task of
 * infra/checkpoint-state-machine.ts) called in the order the state machine's Choice
 * states route it, with its Wait states as timers:
 *
 *   resume -> wait interval -> open -> inject -> wait poll -> decide -> commit | abort | (pending: poll again)
 *   idle, event-time timers pending: wait the seconds open returned -> probe -> (as after open)
 *   a failing step -> wait poll -> resume (the Catch -> Backoff -> Resume path)
 *
 * Where the state machine's execution ends at zero traffic ('end'), this loop runs
 * nothing until input is touched (onInput, what the ingest function's wake-up does on
 * AWS), a nudge or finish(); then it resumes, as a new execution would. So a quiet job
 * costs no steps here either, and the accounted transitions are the deployment's. It
 * keeps one execution name, so a process restarted after a crash takes its own lease
 * back at once.
 */
import { POINTER_NAME } from '../../checkpoint/driver.ts';
import type { CommitPointer } from '../../checkpoint/protocol.ts';
import type { PointerStore } from '../../checkpoint/storage.ts';
import { InvariantError } from '../../errors.ts';
import type { AwsAccounting } from '../../aws/cost/accounting.ts';
import type { CheckpointHandler } from '../../aws/checkpoint/checkpoint-handler.ts';
import { type Action, type Carry, INITIAL_CARRY, LEASE_NAME, type Lease, type Limits } from '../../aws/checkpoint/checkpoint-task.ts';

export interface CheckpointLoopOptions {
  readonly handler: CheckpointHandler;
  readonly pointers: Pick<PointerStore, 'read'>;
  /** Between the end of one epoch and the next opening (the WaitInterval state). */
  readonly intervalMs: number;
  /** Between two looks for acks (WaitForAcks, Backoff). */
  readonly pollMs: number;
  /** An epoch not fully acknowledged by then is aborted. */
  readonly epochTimeoutMs: number;
  /** The WaitTimers state's real wait for `seconds` (tests shorten it). @default seconds x 1000 */
  readonly timersWaitMs?: (seconds: number) => number;
  /** The execution name (lease owner). */
  readonly execution: string;
  readonly now?: () => number;
  /** Step Functions transitions the deployed state machine would make for these steps. */
  readonly accounting?: AwsAccounting;
  readonly log?: (line: string) => void;
}

/**
 * Transitions of each task as the state machine runs it (with the Wait and Choice states
 * around it): a normal epoch is open 3 + inject 1 + decide 3 + commit 1 = 8.
 */
const TRANSITIONS: Record<Action, number> = { resume: 2, open: 3, inject: 1, decide: 3, commit: 1, abort: 1, probe: 3 };

export class LocalCheckpointLoop {
  private readonly limits: Limits;
  private running = false;
  private loop?: Promise<void>;
  private wake?: () => void;
  /** Ends the wait of an ended execution (input, a nudge, finish, stop). */
  private wakeEnded?: () => void;
  /** Input touches so far: one during a step that then ended means the step may not have seen it. */
  private inputs = 0;
  /** finish(): the activity time the final epoch must cover (touched after the drain). */
  private finalAt: number | undefined;
  private finalEpoch = 0;
  private finalDone?: () => void;
  private failure: unknown;
  private ended = false;
  private reachedFinal = false;
  /** What the loop is doing, for a run that stops progressing (the runner's watchdog prints it). */
  private current = 'not started';
  /** Epochs committed by this loop (tests, summaries). */
  readonly committed: number[] = [];
  readonly aborted: number[] = [];

  constructor(private readonly o: CheckpointLoopOptions) {
    // Continue-as-new is for Step Functions' history limit; in process one execution can go on.
    this.limits = { maxEpochs: Number.MAX_SAFE_INTEGER, maxFailures: 10, leaseMs: 10 * 60_000, activityGrainMs: 0, epochTimeoutMs: o.epochTimeoutMs };
  }

  private now(): number {
    return (this.o.now ?? Date.now)();
  }

  /** One task, as the state machine's Task state sends it. */
  step(action: Action, carry: Partial<Carry>): Promise<Carry> {
    this.o.accounting?.record('stepfunctions', 'StateTransition', { requests: TRANSITIONS[action], items: TRANSITIONS[action] });
    return this.o.handler({ action, execution: this.o.execution, carry, limits: this.limits });
  }

  /** The resume step alone (before the runtime restores what the pointer names). */
  async resume(): Promise<Carry> {
    return this.step('resume', INITIAL_CARRY);
  }

  /** Run the loop from `carry` (the result of resume()). */
  start(carry: Carry): void {
    this.running = true;
    this.loop = this.run(carry)
      .catch((e) => {
        this.failure = e;
      })
      .finally(() => {
        this.ended = true;
        this.finalDone?.();
      });
  }

  /** One line: the step or wait the loop is in, the epochs it committed and aborted, the final epoch asked for. */
  describe(): string {
    const final = this.finalAt === undefined ? '' : `; final: covering activity at ${this.finalAt}${this.finalEpoch ? `, epoch ${this.finalEpoch}` : ''}`;
    const failed = this.failure ? `; failed: ${(this.failure as Error).message}` : '';
    return `checkpoint loop ${this.ended ? 'ended' : this.current}; committed ${this.committed.length} (last ${this.committed.at(-1) ?? '-'}), aborted ${this.aborted.length}${final}${failed}`;
  }

  /** `untilInput`: input also ends it (the lease is free during a timers wait). */
  private sleep(ms: number, untilInput = false): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(t);
        resolve();
      };
      if (untilInput) this.wakeEnded = this.wake;
    });
  }

  private async run(first: Carry): Promise<void> {
    let c = first;
    let inputsAtStep = this.inputs;
    while (this.running) {
      let action: Action;
      this.current = `waiting after ${c.next} (epoch ${c.epoch})`;
      switch (c.next) {
        case 'fail':
          throw new InvariantError(`the checkpoint coordinator failed ${c.failures} times in a row: ${c.error?.Cause ?? c.error?.Error ?? 'see the log'}`);
        case 'inject':
          action = 'inject';
          break;
        case 'decide':
        case 'pending':
          await this.sleep(this.o.pollMs);
          action = 'decide';
          break;
        case 'commit':
          action = 'commit';
          break;
        case 'abort':
          action = 'abort';
          break;
        case 'continue':
          c = { ...c.child!.input };
          action = 'resume';
          break;
        case 'timers':
          // Idle with event-time timers pending: the state machine's WaitTimers, then Probe.
          // The lease is free meanwhile: input starts a new execution (resume), as on AWS.
          if (this.inputs === inputsAtStep) await this.sleep(this.finalAt === undefined ? (this.o.timersWaitMs ?? ((s) => s * 1000))(c.wait ?? 1) : this.o.pollMs, true);
          this.wakeEnded = undefined;
          if (this.inputs !== inputsAtStep && this.finalAt === undefined) {
            c = { ...INITIAL_CARRY, failures: c.failures };
            action = 'resume';
          } else action = 'probe';
          break;
        default:
          // The final epoch may have committed already (see finalCovered): then the coordinator opens no other.
          if (this.finalAt !== undefined && (await this.finalCovered())) return this.finalReached();
          if (c.next === 'end' && this.finalAt === undefined) {
            // The execution ended (no input, no timers): nothing runs until something wakes the coordinator.
            this.current = 'ended at zero traffic: waiting for input';
            if (this.inputs === inputsAtStep) await new Promise<void>((resolve) => (this.wakeEnded = resolve));
            this.wakeEnded = undefined;
            if (!this.running) return;
            // A wake-up's new execution: resume (the lease is free), then an interval before its open.
            c = { ...INITIAL_CARRY, failures: c.failures };
            action = 'resume';
            break;
          }
          // wait, end: the next epoch after an interval (sooner when the final one is asked for).
          // Interval 0: no periodic epochs, only the final one.
          if (this.finalAt === undefined && this.o.intervalMs <= 0) await new Promise<void>((resolve) => (this.wake = resolve));
          else await this.sleep(this.finalAt === undefined ? this.o.intervalMs : Math.min(this.o.pollMs, Math.max(1, this.o.intervalMs)));
          action = 'open';
      }
      if (!this.running) return;
      const openedAt = this.now();
      inputsAtStep = this.inputs;
      this.current = `in step ${action} (epoch ${c.epoch})`;
      try {
        const before = c;
        c = await this.step(action, c);
        if (action === 'open' && c.next === 'inject' && this.finalAt !== undefined && openedAt >= this.finalAt) this.finalEpoch = c.epoch;
        if (action === 'abort' && c.next === 'wait') this.aborted.push(before.epoch);
        if (action === 'commit' && c.next === 'wait') await this.afterCommit();
      } catch (e) {
        this.o.log?.(`checkpoint ${action} failed: ${(e as Error).message}`);
        await this.sleep(this.o.pollMs);
        // A failing resume fails the loop, as the state machine's Resume Catch goes to Failed.
        c = await this.step('resume', { ...c, error: { Error: (e as Error).name, Cause: (e as Error).message } });
      }
    }
  }

  private async afterCommit(): Promise<void> {
    const ptr = (await this.o.pointers.read<CommitPointer>(POINTER_NAME))?.value;
    if (!ptr) return;
    if (!this.committed.includes(ptr.epoch)) this.committed.push(ptr.epoch);
    if (this.finalAt !== undefined && ((this.finalEpoch > 0 && ptr.epoch >= this.finalEpoch) || (await this.finalCovered()))) this.finalReached();
  }

  /**
   * The activity the final epoch must cover is covered: an epoch that opened after it
   * committed (the lease's coveredFrom, as the open step reads it). That epoch opened
   * after the drain, so it is a final one, even if it opened before finish() was called:
   * the loop keeps opening epochs on its interval while the caller touches the activity
   * item, and one of them may see the touch first. The coordinator then opens no other.
   */
  private async finalCovered(): Promise<boolean> {
    let lease: Lease | undefined;
    try {
      lease = (await this.o.pointers.read<Lease>(LEASE_NAME))?.value;
    } catch (e) {
      // A failed look is no answer: the next one (or the next commit) decides.
      this.o.log?.(`checkpoint lease read failed: ${(e as Error).message}`);
      return false;
    }
    return lease !== undefined && this.finalAt !== undefined && lease.coveredFrom > this.finalAt;
  }

  private finalReached(): void {
    this.reachedFinal = true;
    this.running = false;
    this.finalDone?.();
  }

  /**
   * A bounded run drained: one more epoch, so every output is committed. `activityAt`: when
   * the caller touched the activity item, after the drain (default now, which must then
   * follow the touch). Resolves once an epoch opened at or after it committed (one opened
   * by this loop, or any that covers the activity); the loop then ends. Throws the loop's
   * failure if it failed (before or meanwhile) rather than wait for an epoch it cannot open.
   */
  async finish(activityAt = this.now()): Promise<void> {
    const done = new Promise<void>((resolve) => (this.finalDone = resolve));
    this.finalAt = activityAt;
    if (!this.loop) throw new InvariantError('the checkpoint loop finished before it was started');
    if (this.ended) this.finalDone?.();
    this.wakeAll();
    await done;
    await this.loop;
    if (this.failure) throw this.failure;
    if (!this.reachedFinal) throw new InvariantError('the checkpoint loop was stopped before its final epoch committed');
  }

  /** Open the next epoch now rather than after the interval (a savepoint request arrived); an ended execution resumes. */
  nudge(): void {
    this.wakeAll();
  }

  /** Input was touched (the activity item): an ended execution resumes, as the ingest function's wake-up starts one on AWS. */
  onInput(): void {
    this.inputs++;
    this.wakeEnded?.();
  }

  /** Stop without a final epoch (idempotent). */
  async stop(): Promise<void> {
    this.running = false;
    this.wakeAll();
    await this.loop;
  }

  private wakeAll(): void {
    this.wake?.();
    this.wakeEnded?.();
  }
}
