/**
 * The checkpoint state machine in process, for local-AWS mode: the definition the CDK app
 * deploys (lib/aws/checkpoint/state-machine-definition.ts) executed by
 * aws-local-stepfunctions, its task states calling the in-process CheckpointHandler as the
 * Lambda function would, its ContinueAsNew starting a new local execution.
 *
 * Waits: WaitInterval lasts the configured interval (0: until a nudge or finish()),
 * WaitForAcks and Backoff the local poll, WaitTimers the seconds the open step computed.
 * aws-local-stepfunctions reads a Wait state's override when the state starts, so the
 * overrides here are getters: they see which wait runs, and shorten the interval once the
 * final epoch or a savepoint is asked for.
 *
 * Where the execution ends at zero traffic, nothing runs until input is touched (onInput:
 * what the ingest function's wake-up does on AWS, checkpoint-wakeup.ts), a nudge or
 * finish(); then a new execution starts. Input during a WaitTimers wait (the lease is
 * free then) also starts one, as on AWS; the waiting execution, which would find the
 * lease taken at its probe and end, is stopped instead. A nudge or finish() during
 * WaitInterval stops the execution and starts another, whose resume repairs anything in
 * flight. Executions keep the name of the one before (the lease owner), so a process
 * restarted after a crash takes its own lease back at once.
 *
 * Transitions are accounted per state entered or retried (the event log of each
 * execution), as Step Functions bills them.
 */
import { StateMachine } from 'aws-local-stepfunctions';
import type { PointerStore } from '../../checkpoint/storage.ts';
import { POINTER_NAME } from '../../checkpoint/driver.ts';
import type { CommitPointer } from '../../checkpoint/protocol.ts';
import { InvariantError } from '../../errors.ts';
import type { AwsAccounting } from '../../aws/cost/accounting.ts';
import type { CheckpointHandler } from '../../aws/checkpoint/checkpoint-handler.ts';
import { type Carry, LEASE_NAME, type Lease, type TaskInput } from '../../aws/checkpoint/checkpoint-task.ts';
import { type AslDefinition, CHECKPOINT_STATES as S, checkpointStateMachineDefinition } from '../../aws/checkpoint/state-machine-definition.ts';

// aws-local-stepfunctions 3 uses Promise.withResolvers (Node 22); Node 20 lacks it.
(Promise as unknown as { withResolvers?: unknown }).withResolvers ??= function <T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((a, b) => ((resolve = a), (reject = b)));
  return { promise, resolve, reject };
};

export interface LocalCheckpointStateMachineOptions {
  readonly handler: CheckpointHandler;
  readonly pointers: Pick<PointerStore, 'read'>;
  /** The WaitInterval state: between the end of one epoch and the next opening (0: only a nudge or finish() opens one). */
  readonly intervalMs: number;
  /** The WaitForAcks and Backoff states, and task retries. */
  readonly pollMs: number;
  /** An epoch not fully acknowledged by then is aborted. */
  readonly epochTimeoutMs: number;
  /** The WaitTimers state's real wait for `seconds` (tests shorten it). @default seconds x 1000 */
  readonly timersWaitMs?: (seconds: number) => number;
  /** The first execution's name, unless the lease names an owner (a crashed run's execution). */
  readonly execution: string;
  /** Epochs per execution before continuing as new. @default no limit (the history limit is Step Functions') */
  readonly maxEpochs?: number;
  readonly now?: () => number;
  /** Called once per epoch these executions committed (a test's crash waits for one). */
  readonly onCommitted?: (epoch: number) => void;
  /** Where the transitions go. */
  readonly accounting?: AwsAccounting;
  readonly log?: (line: string) => void;
}

/** One local execution of the definition. */
interface Execution {
  readonly name: string;
  abort: () => void;
  /** The Wait state it is in (set as the state starts, cleared by the next task). */
  waiting?: string;
  /** What its last task returned. */
  last?: Carry;
  /** onInput calls when its last task started: more since means that task may not have seen the input. */
  inputsAtTask: number;
  /** Why its Resume task failed (the execution then fails). */
  resumeFailure?: unknown;
  /** Settles when it ended, failed or was stopped. */
  done: Promise<void>;
}

/** Longer than any run: setTimeout's largest delay (about 24.8 days). */
const FOREVER_MS = 2 ** 31 - 1;
const TASK_ARN = 'arn:aws:lambda:us-east-1:000000000000:function:sluice-checkpoint';
const MACHINE_ARN = 'arn:aws:states:us-east-1:000000000000:stateMachine:sluice-checkpoints';

class StepFunctionsTaskError extends Error {
  constructor(name: string, message: string) {
    super(message);
    this.name = name;
  }
}

export class LocalCheckpointStateMachine {
  readonly definition: AslDefinition;
  private readonly machine: StateMachine;
  private current?: Execution;
  /** Executions may start (cleared by stop, a failure, the final epoch). */
  private running = false;
  private started = false;
  /** The last execution ended at zero traffic: the next wake-up starts one under this name. */
  private ended?: string;
  private inputs = 0;
  /** A savepoint was asked for: the next WaitInterval is short. */
  private soon = false;
  /** finish(): the activity time the final epoch must cover (touched after the drain). */
  private finalAt: number | undefined;
  private finalEpoch = 0;
  private finalDone?: () => void;
  private reachedFinal = false;
  private failure: unknown;
  private firstResume?: { resolve(): void; reject(e: unknown): void };
  private readonly inFlight = new Set<Promise<unknown>>();
  /** What the coordinator is doing, for a run that stops progressing (the runner's watchdog prints it). */
  private activity = 'not started';
  /** Epochs committed by these executions (tests, summaries). */
  readonly committed: number[] = [];
  readonly aborted: number[] = [];

  constructor(private readonly o: LocalCheckpointStateMachineOptions) {
    const seconds = (ms: number) => Math.max(1, Math.ceil(ms / 1000));
    this.definition = checkpointStateMachineDefinition({
      taskArn: TASK_ARN,
      partition: 'aws',
      intervalSeconds: seconds(o.intervalMs),
      pollSeconds: seconds(o.pollMs),
      // One process owns the checkpoint directory: a long lease, no activity grain.
      limits: { maxEpochs: o.maxEpochs ?? Number.MAX_SAFE_INTEGER, maxFailures: 10, leaseMs: 10 * 60_000, activityGrainMs: 0, epochTimeoutMs: o.epochTimeoutMs },
    });
    this.machine = new StateMachine(this.definition as never, { validationOptions: { checkPaths: true, checkArn: true } });
  }

  private now(): number {
    return (this.o.now ?? Date.now)();
  }

  /** Start the first execution; resolves once its Resume step returned (rejects with its failure). */
  async start(): Promise<void> {
    if (this.started) throw new InvariantError('the checkpoint state machine was started twice');
    this.started = true;
    this.running = true;
    const owner = (await this.o.pointers.read<Lease>(LEASE_NAME))?.value.owner;
    const resumed = new Promise<void>((resolve, reject) => (this.firstResume = { resolve, reject }));
    this.launch(owner ?? this.o.execution, {});
    await resumed;
  }

  /** One line: the step or wait the coordinator is in, the epochs it committed and aborted, the final epoch asked for. */
  describe(): string {
    const final = this.finalAt === undefined ? '' : `; final: covering activity at ${this.finalAt}${this.finalEpoch ? `, epoch ${this.finalEpoch}` : ''}`;
    const failed = this.failure ? `; failed: ${(this.failure as Error).message}` : '';
    const over = this.started && !this.running;
    return `checkpoint loop ${over ? 'ended' : this.activity}; committed ${this.committed.length} (last ${this.committed.at(-1) ?? '-'}), aborted ${this.aborted.length}${final}${failed}`;
  }

  private launch(name: string, input: Partial<Carry>): void {
    this.ended = undefined;
    const execution: Execution = { name, inputsAtTask: this.inputs, abort: () => {}, done: Promise.resolve() };
    const run = this.machine.run(input as never, {
      noThrowOnAbort: true,
      overrides: this.overrides(execution),
      context: { Execution: { Id: `${MACHINE_ARN.replace(':stateMachine:', ':execution:')}:${name}`, Name: name }, StateMachine: { Id: MACHINE_ARN, Name: 'sluice-checkpoints' } } as never,
    });
    void this.account(run.eventLogs);
    execution.abort = run.abort;
    execution.done = run.result.then(
      (out) => this.onEnd(execution, out as Carry | null),
      (e) => this.onFailure(execution, e),
    );
    this.current = execution;
  }

  private async account(events: AsyncGenerator<{ type: string }>): Promise<void> {
    for await (const e of events) {
      if (e.type === 'StateEntered' || e.type === 'StateRetried') this.o.accounting?.record('stepfunctions', 'StateTransition', { requests: 1, items: 1 });
    }
  }

  private overrides(execution: Execution) {
    const tasks: Record<string, (input: unknown) => Promise<unknown>> = {};
    const retries: Record<string, number> = {};
    const waits = {};
    const waitMs: Record<string, () => number> = {
      [S.waitInterval]: () => (this.finalAt !== undefined || this.soon ? Math.min(this.o.pollMs, Math.max(1, this.o.intervalMs)) : this.o.intervalMs > 0 ? this.o.intervalMs : FOREVER_MS),
      [S.waitForAcks]: () => this.o.pollMs,
      [S.backoff]: () => this.o.pollMs,
      [S.waitTimers]: () => {
        // Input during the step that released the lease (or a final epoch, a savepoint): a wake-up starts an execution at once.
        if (this.inputs !== execution.inputsAtTask || this.finalAt !== undefined || this.soon) setImmediate(() => this.interrupt(execution));
        return Math.min(FOREVER_MS, (this.o.timersWaitMs ?? ((s) => s * 1000))(execution.last?.wait ?? 1));
      },
    };
    for (const [name, state] of Object.entries(this.definition.States)) {
      if (state.Retry) retries[name] = this.o.pollMs;
      if (state.Type === 'Task') tasks[name] = state.Resource === TASK_ARN ? (input) => this.track(this.task(execution, input as TaskInput)) : (input) => this.continueAsNew(execution, input as { StateMachineArn: string; Name: string; Input: Carry });
      if (state.Type !== 'Wait') continue;
      const ms = waitMs[name];
      if (!ms) throw new InvariantError(`the checkpoint state machine's Wait state ${name} has no local wait`);
      Object.defineProperty(waits, name, {
        enumerable: true,
        get: () => {
          execution.waiting = name;
          return ms();
        },
      });
    }
    return { taskResourceLocalHandlers: tasks as never, waitTimeOverrides: waits, retryIntervalOverrides: retries };
  }

  private track<T>(p: Promise<T>): Promise<T> {
    this.inFlight.add(p);
    void p.then(
      () => this.inFlight.delete(p),
      () => this.inFlight.delete(p),
    );
    return p;
  }

  /** A Task state: the handler, as Step Functions invokes the Lambda function, and what the run keeps of its result. */
  private async task(execution: Execution, input: TaskInput): Promise<Carry> {
    const { action, carry } = input;
    execution.waiting = undefined;
    execution.inputsAtTask = this.inputs;
    if (action === 'open') this.soon = false;
    this.activity = `in step ${action} (epoch ${carry.epoch ?? 0})`;
    const openedAt = this.now();
    let c: Carry;
    try {
      c = await this.o.handler(input);
    } catch (e) {
      // A failing resume fails the execution (its Catch goes to Failed): that failure is the run's.
      if (action === 'resume') execution.resumeFailure = e;
      else this.o.log?.(`checkpoint ${action} failed: ${(e as Error).message}`);
      throw e;
    }
    execution.last = c;
    if (execution === this.current) this.activity = `waiting after ${c.next} (epoch ${c.epoch})`;
    if (action === 'resume') {
      if (c.next === 'fail') execution.resumeFailure = new InvariantError(`the checkpoint coordinator failed ${c.failures} times in a row: ${carry.error?.Cause ?? carry.error?.Error ?? 'see the log'}`);
      this.firstResume?.resolve();
      this.firstResume = undefined;
    }
    if ((action === 'open' || action === 'probe') && c.next === 'inject' && this.finalAt !== undefined && openedAt >= this.finalAt) this.finalEpoch = c.epoch;
    if (action === 'abort' && c.next === 'wait') this.aborted.push(carry.epoch ?? 0);
    if (action === 'commit' && c.next === 'wait') await this.afterCommit();
    return c;
  }

  /** The ContinueAsNew state: StartExecution of the same definition, which takes the lease over from its parent. */
  private async continueAsNew(parent: Execution, input: { StateMachineArn: string; Name: string; Input: Carry }): Promise<unknown> {
    if (input.StateMachineArn !== MACHINE_ARN) throw new StepFunctionsTaskError('StepFunctions.StateMachineDoesNotExistException', `State Machine Does Not Exist: '${input.StateMachineArn}'`);
    if (input.Name === parent.name || (this.current !== parent && this.current?.name === input.Name)) {
      throw new StepFunctionsTaskError('StepFunctions.ExecutionAlreadyExistsException', `Execution Already Exists: '${input.Name}'`);
    }
    if (!this.running || this.current !== parent) throw new StepFunctionsTaskError('StepFunctions.StepFunctionsException', 'the local state machine is stopping');
    this.launch(input.Name, input.Input);
    return { ExecutionArn: `${MACHINE_ARN.replace(':stateMachine:', ':execution:')}:${input.Name}`, StartDate: new Date().toISOString() };
  }

  private onEnd(execution: Execution, out: Carry | null): void {
    // Stopped by us (null), or a parent whose continuation runs: nothing to do.
    if (out === null || execution !== this.current || !this.running) return;
    this.current = undefined;
    if (this.finalAt !== undefined) {
      this.activity = 'ended: looking for the final epoch';
      void this.track(
        this.finalCovered().then((covered) => {
          if (covered) return this.finalReached();
          // Not this time (its lease was taken, say): another execution, a poll later.
          setTimeout(() => this.running && !this.current && this.launch(execution.name, {}), this.o.pollMs);
        }),
      );
      return;
    }
    // Input touched during its last step, which may have released the lease before it: the wake-up's execution.
    if (this.inputs !== execution.inputsAtTask) return this.launch(execution.name, {});
    this.activity = 'ended at zero traffic: waiting for input';
    this.ended = execution.name;
  }

  private onFailure(execution: Execution, e: unknown): void {
    if (execution !== this.current || !this.running) return;
    this.failure = execution.resumeFailure ?? e;
    this.over();
  }

  /** Stop an execution waiting in WaitInterval or WaitTimers and start another (a wake-up, a nudge, the final epoch). */
  private interrupt(execution: Execution | undefined): void {
    if (!execution || execution !== this.current || !this.running) return;
    if (execution.waiting !== S.waitInterval && execution.waiting !== S.waitTimers) return;
    execution.abort();
    this.launch(execution.name, {});
  }

  private wake(): void {
    if (!this.running) return;
    if (this.ended !== undefined) this.launch(this.ended, {});
    else this.interrupt(this.current);
  }

  private async afterCommit(): Promise<void> {
    const ptr = (await this.o.pointers.read<CommitPointer>(POINTER_NAME))?.value;
    if (!ptr) return;
    if (!this.committed.includes(ptr.epoch)) {
      this.committed.push(ptr.epoch);
      this.o.onCommitted?.(ptr.epoch);
    }
    if (this.finalAt !== undefined && ((this.finalEpoch > 0 && ptr.epoch >= this.finalEpoch) || (await this.finalCovered()))) this.finalReached();
  }

  /**
   * The activity the final epoch must cover is covered: an epoch that opened after it
   * committed (the lease's coveredFrom, as the open step reads it). That epoch opened
   * after the drain, so it is a final one, even if it opened before finish() was called:
   * epochs keep opening on the interval while the caller touches the activity item, and
   * one of them may see the touch first. No other epoch is opened then.
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
    if (this.reachedFinal) return;
    this.reachedFinal = true;
    this.over();
  }

  /** No execution runs from here on: stop the current one, settle finish() and start(). */
  private over(): void {
    this.running = false;
    this.current?.abort();
    this.firstResume?.reject(this.failure ?? new InvariantError('the checkpoint state machine stopped before its first resume'));
    this.finalDone?.();
  }

  /** Until no task of a stopped execution still runs (tasks go on after an abort, as a Lambda invocation does). */
  private async quiesce(): Promise<void> {
    await this.current?.done;
    while (this.inFlight.size) await Promise.allSettled([...this.inFlight]);
  }

  /**
   * A bounded run drained: one more epoch, so every output is committed. `activityAt`: when
   * the caller touched the activity item, after the drain (default now, which must then
   * follow the touch). Resolves once an epoch opened at or after it committed (one opened
   * here, or any that covers the activity); no execution runs after that. Throws the
   * failure of the executions if they failed (before or meanwhile) rather than wait for an
   * epoch that cannot open.
   */
  async finish(activityAt = this.now()): Promise<void> {
    if (!this.started) throw new InvariantError('the checkpoint loop finished before it was started');
    const done = new Promise<void>((resolve) => (this.finalDone = resolve));
    this.finalAt = activityAt;
    if (!this.running) this.finalDone?.();
    else if (await this.finalCovered()) this.finalReached();
    else this.wake();
    await done;
    await this.quiesce();
    if (this.failure) throw this.failure;
    if (!this.reachedFinal) throw new InvariantError('the checkpoint loop was stopped before its final epoch committed');
  }

  /** Open the next epoch now rather than after the interval (a savepoint request arrived); an ended execution is followed by a new one. */
  nudge(): void {
    this.soon = true;
    this.wake();
  }

  /** Input was touched (the activity item): start an execution where none owns the lease, as the ingest function's wake-up does on AWS. */
  onInput(): void {
    this.inputs++;
    if (!this.running) return;
    if (this.ended !== undefined) this.launch(this.ended, {});
    else if (this.current?.waiting === S.waitTimers) this.interrupt(this.current);
  }

  /** Stop without a final epoch (idempotent). */
  async stop(): Promise<void> {
    if (this.running) this.over();
    await this.quiesce();
  }
}
