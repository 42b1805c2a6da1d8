/**
 * Stopping and starting a deployed job around an in-place restore: nothing may consume a
 * stage queue or run the checkpoint coordinator while partitions are rolled back.
 *
 * stop():
 *   1. take the coordinator's lease (`${job}#c` ptr#execution, compare-and-set) for the
 *      restore: from here the ingest function's wake-up sees it owned and starts nothing,
 *      and any execution's next step finds the lease taken and ends;
 *   2. stop the executions still RUNNING (StopExecution) and wait until none runs;
 *   3. disable each stage queue's event source mapping (UpdateEventSourceMapping) and
 *      wait until Lambda reports it Disabled;
 *   4. wait until no stage queue has a message in flight (ApproximateNumberOfMessagesNotVisible
 *      = 0): the batches invocations already received are deleted or back in the queue,
 *      so no invocation can still commit.
 * start(): re-enable the mappings that were enabled, release the lease, and start a
 * coordinator execution (it resumes from the control items the restore wrote).
 *
 * A restore that fails leaves the job stopped (consumers would only fail against
 * half-restored partitions): run it again, which is idempotent, or start() by hand.
 *
 * JobControlPort is the AWS surface (one method per kind of call), so the orchestration
 * is tested with the SQS calls on fauxqs, DynamoDB Local for the lease, and mocks only
 * where no local server exists (Lambda, Step Functions).
 */
import { GetEventSourceMappingCommand, type LambdaClient, ListEventSourceMappingsCommand, UpdateEventSourceMappingCommand } from '@aws-sdk/client-lambda';
import { ListExecutionsCommand, type SFNClient, StartExecutionCommand, StopExecutionCommand } from '@aws-sdk/client-sfn';
import { GetQueueAttributesCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { PointerStore } from '../../checkpoint/storage.ts';
import { SluiceError } from '../../errors.ts';
import { LEASE_NAME, type Lease } from '../checkpoint/checkpoint-task.ts';

export interface StageConsumer {
  readonly stage: number;
  readonly queueUrl: string;
  readonly queueArn: string;
  /** The event source mapping's UUID, and the function it invokes. */
  readonly uuid: string;
  readonly functionArn: string;
  /** Enabled, Disabled, Enabling, Disabling, Creating, Updating, Deleting. */
  readonly state: string;
}

export interface StageQueueRef {
  readonly stage: number;
  readonly url: string;
  readonly arn: string;
}

/** The AWS calls stopping and starting a job makes. */
export interface JobControlPort {
  /** Event source mappings reading a queue (ListEventSourceMappings by EventSourceArn). */
  consumersOf(queue: StageQueueRef): Promise<StageConsumer[]>;
  setConsumerEnabled(uuid: string, enabled: boolean): Promise<void>;
  consumerState(uuid: string): Promise<string>;
  /** Messages received and neither deleted nor made visible again. */
  inFlight(queueUrl: string): Promise<number>;
  /** ARNs of the coordinator's RUNNING executions (none without a state machine). */
  runningExecutions(): Promise<string[]>;
  stopExecution(arn: string, cause: string): Promise<void>;
  startExecution(name: string): Promise<void>;
}

/** The job did not reach the state asked for in time (consumers still enabled, messages in flight, an execution running). */
export class JobControlTimeoutError extends SluiceError {
  readonly code = 'JOB_CONTROL_TIMEOUT';
  readonly retryable = true;
  constructor(
    readonly waitingFor: string,
    readonly waitedMs: number,
  ) {
    super(`waited ${waitedMs} ms for ${waitingFor}; the job is left stopped as far as it got (run the command again to continue)`);
  }
}

/** Someone else holds the coordinator's lease for a restore or keeps changing it. */
export class CoordinatorLeaseError extends SluiceError {
  readonly code = 'COORDINATOR_LEASE';
  readonly retryable = true;
  constructor(
    readonly job: string,
    readonly detail: string,
  ) {
    super(`job "${job}": could not take the checkpoint coordinator's lease (${detail})`);
  }
}

export interface JobControlOptions {
  readonly job: string;
  readonly port: JobControlPort;
  /** The coordinator's control items (the lease). */
  readonly pointers: PointerStore;
  readonly queues: readonly StageQueueRef[];
  /** Who holds the lease while the job is stopped (an execution name never uses ':'). */
  readonly owner: string;
  /** How long the lease holds without start() (a crashed restore must not block the job forever). @default 1 hour */
  readonly leaseMs?: number;
  /** Between two looks at a mapping, a queue or an execution. @default 1000 */
  readonly pollMs?: number;
  /** Per wait. @default 15 minutes (a queue's visibility timeout is 6 x the function's) */
  readonly timeoutMs?: number;
  readonly now?: () => number;
  readonly sleep?: (ms: number) => Promise<void>;
  readonly log?: (line: string) => void;
}

/** What stop() changed, for start(). */
export interface StoppedJob {
  /** Mappings that were enabled and were disabled. */
  readonly disabled: readonly StageConsumer[];
  readonly stoppedExecutions: readonly string[];
  readonly leaseOwner: string;
}

export class JobControl {
  private readonly now: () => number;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly pollMs: number;
  private readonly timeoutMs: number;

  constructor(private readonly o: JobControlOptions) {
    this.now = o.now ?? Date.now;
    this.sleep = o.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)));
    this.pollMs = o.pollMs ?? 1000;
    this.timeoutMs = o.timeoutMs ?? 15 * 60_000;
  }

  async stop(): Promise<StoppedJob> {
    const { port, log } = this.o;
    await this.takeLease();
    log?.(`coordinator lease taken by ${this.o.owner}`);
    const running = await port.runningExecutions();
    for (const arn of running) await port.stopExecution(arn, `sluice restore (${this.o.owner})`);
    await this.until('no coordinator execution running', async () => (await port.runningExecutions()).length === 0);
    if (running.length) log?.(`stopped ${running.length} coordinator execution(s)`);
    const consumers = (await Promise.all(this.o.queues.map((q) => port.consumersOf(q)))).flat();
    const disabled = consumers.filter((c) => c.state !== 'Disabled' && c.state !== 'Disabling');
    for (const c of disabled) await port.setConsumerEnabled(c.uuid, false);
    for (const c of consumers) await this.until(`the event source mapping of stage ${c.stage} (${c.uuid}) to be Disabled`, async () => (await port.consumerState(c.uuid)) === 'Disabled');
    log?.(`disabled ${disabled.length} stage consumer(s)`);
    for (const q of this.o.queues) await this.until(`no message in flight on stage ${q.stage}'s queue`, async () => (await port.inFlight(q.url)) === 0);
    return { disabled, stoppedExecutions: running, leaseOwner: this.o.owner };
  }

  async start(stopped: StoppedJob): Promise<void> {
    const { port, pointers, log } = this.o;
    for (const c of stopped.disabled) await port.setConsumerEnabled(c.uuid, true);
    log?.(`enabled ${stopped.disabled.length} stage consumer(s)`);
    const cur = await pointers.read<Lease>(LEASE_NAME);
    if (cur?.value.owner === stopped.leaseOwner) {
      if (!(await pointers.compareAndSet(LEASE_NAME, cur.version, { ...cur.value, owner: null, until: 0 }))) throw new CoordinatorLeaseError(this.o.job, 'it changed while being released');
    }
    // A new execution resumes the coordinator from its control items (a quiet job's would end at once).
    await port.startExecution(restoreExecutionName(this.o.job, this.now()));
    log?.('coordinator execution started');
  }

  /** The lease, whoever holds it: stopped executions cannot release theirs. */
  private async takeLease(): Promise<void> {
    for (let attempt = 0; attempt < 5; attempt++) {
      const cur = await this.o.pointers.read<Lease>(LEASE_NAME);
      const lease = cur?.value ?? { owner: null, until: 0, coveredFrom: 0 };
      if (lease.owner?.startsWith('restore-') && lease.owner !== this.o.owner && lease.until > this.now()) {
        throw new CoordinatorLeaseError(this.o.job, `another restore (${lease.owner}) holds it until ${new Date(lease.until).toISOString()}`);
      }
      const next: Lease = { ...lease, owner: this.o.owner, until: this.now() + (this.o.leaseMs ?? 3_600_000) };
      if (await this.o.pointers.compareAndSet(LEASE_NAME, cur?.version ?? 0, next)) return;
    }
    throw new CoordinatorLeaseError(this.o.job, 'it kept changing (an execution renewing it)');
  }

  private async until(what: string, done: () => Promise<boolean>): Promise<void> {
    const started = this.now();
    while (!(await done())) {
      const waited = this.now() - started;
      if (waited >= this.timeoutMs) throw new JobControlTimeoutError(what, waited);
      await this.sleep(this.pollMs);
    }
  }
}

/** Stop the job, run `body`, start the job again; a failing body leaves the job stopped (see the header). */
export async function whileStopped<T>(control: JobControl, body: (stopped: StoppedJob) => Promise<T>): Promise<T> {
  const stopped = await control.stop();
  const result = await body(stopped);
  await control.start(stopped);
  return result;
}

/** Step Functions execution names: 1-80 of [A-Za-z0-9_-]. */
export function restoreExecutionName(job: string, now: number): string {
  const suffix = `-restore-${now}`;
  return job.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 80 - suffix.length) + suffix;
}

/** The lease owner of a restore (never an execution name: those have no ':'). */
export function restoreLeaseOwner(now: number): string {
  return `restore-${now}`;
}

/** JobControlPort on the SDK clients (a deployed job, or LocalStack through AWS_ENDPOINT_URL*). */
export class AwsJobControlPort implements JobControlPort {
  constructor(
    private readonly c: { lambda: LambdaClient; sqs: SQSClient; sfn: SFNClient; stateMachineArn?: string },
  ) {}

  async consumersOf(queue: StageQueueRef): Promise<StageConsumer[]> {
    const out: StageConsumer[] = [];
    let marker: string | undefined;
    do {
      const r = await this.c.lambda.send(new ListEventSourceMappingsCommand({ EventSourceArn: queue.arn, Marker: marker }));
      for (const m of r.EventSourceMappings ?? []) out.push({ stage: queue.stage, queueUrl: queue.url, queueArn: queue.arn, uuid: m.UUID!, functionArn: m.FunctionArn ?? '', state: m.State ?? 'Unknown' });
      marker = r.NextMarker;
    } while (marker);
    return out;
  }

  async setConsumerEnabled(uuid: string, enabled: boolean): Promise<void> {
    await this.c.lambda.send(new UpdateEventSourceMappingCommand({ UUID: uuid, Enabled: enabled }));
  }

  async consumerState(uuid: string): Promise<string> {
    return (await this.c.lambda.send(new GetEventSourceMappingCommand({ UUID: uuid }))).State ?? 'Unknown';
  }

  async inFlight(queueUrl: string): Promise<number> {
    const r = await this.c.sqs.send(new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['ApproximateNumberOfMessagesNotVisible'] }));
    return Number(r.Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0);
  }

  async runningExecutions(): Promise<string[]> {
    if (!this.c.stateMachineArn) return [];
    const out: string[] = [];
    let token: string | undefined;
    do {
      const r = await this.c.sfn.send(new ListExecutionsCommand({ stateMachineArn: this.c.stateMachineArn, statusFilter: 'RUNNING', nextToken: token }));
      out.push(...(r.executions ?? []).map((e) => e.executionArn!));
      token = r.nextToken;
    } while (token);
    return out;
  }

  async stopExecution(arn: string, cause: string): Promise<void> {
    try {
      await this.c.sfn.send(new StopExecutionCommand({ executionArn: arn, cause }));
    } catch (e) {
      // Gone meanwhile (expired history): nothing runs.
      if ((e as { name?: string }).name !== 'ExecutionDoesNotExist') throw e;
    }
  }

  async startExecution(name: string): Promise<void> {
    if (!this.c.stateMachineArn) return;
    try {
      await this.c.sfn.send(new StartExecutionCommand({ stateMachineArn: this.c.stateMachineArn, name, input: '{}' }));
    } catch (e) {
      if ((e as { name?: string }).name !== 'ExecutionAlreadyExists') throw e;
    }
  }
}
