/**
 * The checkpoint state machine as deployed (checkpointAsl(): the definition SluiceJob
 * synthesises) run by aws-local-stepfunctions, its Lambda tasks overridden by the real
 * task code (createCheckpointHandler) against DynamoDB Local and fauxqs. Partitions are
 * played by the test: it reads the barriers the Inject step put on the source queues and
 * writes the acks an operator would (DynamoDbAckStore), with the event-time timers it
 * reports. Time is a fake clock the steps read. An aborted epoch is counted in the
 * metric the aborted-epochs alarm watches (Powertools' embedded metric format on stdout).
 */
import { Metrics } from '@aws-lambda-powertools/metrics';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { StateMachine } from 'aws-local-stepfunctions';
import { job } from '../../examples/nexmark/q5.ts';
import { checkpointAsl, type CheckpointTimingProps } from '../../infra/checkpoint-state-machine.ts';
import { barrierOfBody } from '../../lib/aws/checkpoint/checkpoint-barriers.ts';
import { createCheckpointHandler, type CheckpointHandler } from '../../lib/aws/checkpoint/checkpoint-handler.ts';
import { type Carry, LEASE_NAME, type Lease } from '../../lib/aws/checkpoint/checkpoint-task.ts';
import { DynamoDbPointerStore } from '../../lib/aws/dynamodb/dynamodb-pointers.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-table.ts';
import { createBucket, S3BlobStore } from '../../lib/aws/s3/s3-blob-store.ts';
import { METRICS_NAMESPACE } from '../../lib/aws/handler-metrics.ts';
import { decodeBody } from '../../lib/aws/sqs/sqs-codec.ts';
import { createStageQueues, StaticQueues, type StageQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { EPOCHS_ABORTED_METRIC } from '../../infra/monitoring.ts';
import { POINTER_NAME, RECORD_NAME } from '../../lib/checkpoint/driver.ts';
import { manifestObjectKey, sourcePartitionKey, type CommitPointer, type CoordinatorRecord } from '../../lib/checkpoint/protocol.ts';
import { compile } from '../../lib/graph/compile.ts';
import { SluiceError } from '../../lib/errors.ts';
import type { AckTimers, BarrierAck } from '../../lib/transport/envelope.ts';
import { drainQueue, localClients, unique } from './helpers.ts';

// aws-local-stepfunctions 3 uses Promise.withResolvers (Node 22); Node 20 lacks it.
(Promise as unknown as { withResolvers?: unknown }).withResolvers ??= function <T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((a, b) => ((resolve = a), (reject = b)));
  return { promise, resolve, reject };
};

class Crash extends SluiceError {
  readonly code = 'TEST_CRASH';
  constructor(
    readonly retryable: boolean,
    where: string,
  ) {
    super(`injected crash at ${where}`);
  }
}

const clients = localClients();
const plan = compile(job.graph);
const TASKS = ['Resume', 'Open', 'Inject', 'Decide', 'Commit', 'Abort', 'Probe'] as const;
const SM_ARN = 'arn:aws:states:us-east-1:123456789012:stateMachine:sluice-checkpoints';
const TIMING: CheckpointTimingProps = { intervalSeconds: 1, pollSeconds: 1, epochTimeoutSeconds: 1, activityGrainSeconds: 0 };

afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

/** One deployment: its own table, bucket and queues; a fake clock; partitions that ack when told to. */
async function world(options: { hooks?: Record<string, () => void>; ack?: (epoch: number) => boolean; timers?: (epoch: number, participant: number) => AckTimers | undefined; metrics?: Metrics } = {}) {
  const table = unique('sluice-sfn');
  const bucket = unique('sfn').toLowerCase();
  const prefix = `${unique('t')}-`;
  const [, , queues] = await Promise.all([createStateTable(clients.dynamodb, table), createBucket(clients.s3, bucket), createStageQueues(clients.sqs, plan, { prefix })]);
  let clock = 1_000_000;
  const now = () => (clock += 10);
  const handler = createCheckpointHandler({
    job,
    ...clients,
    bucket,
    tableName: table,
    queues: new StaticQueues(queues),
    metrics: options.metrics,
    overrides: { now, hook: (point) => options.hooks?.[point]?.() },
  });
  const pointers = new DynamoDbPointerStore({ client: clients.dynamodb, tableName: table, job: job.name });
  const blobs = new S3BlobStore({ s3: clients.s3, bucket });
  return { handler, queues, pointers, blobs, now, advance: (ms: number) => (clock += ms), ack: options.ack ?? (() => true), timers: options.timers ?? (() => undefined), barriers: [] as number[], probes: [] as { group: string; at: number }[] };
}
type World = Awaited<ReturnType<typeof world>>;

/** What the source partitions and the operators downstream would do: take the barriers, ack every participant. */
async function playPartitions(w: World, q: readonly StageQueues[]): Promise<void> {
  const messages = await drainQueue(clients.sqs, q[0].url);
  for (const m of messages) {
    const body = decodeBody(m.Body!);
    if (body.k === 'i' && body.probe) w.probes.push({ group: m.Attributes!.MessageGroupId!, at: body.at! });
  }
  const epochs = messages.map((m) => barrierOfBody(m.Body!)).filter((b) => b !== undefined);
  for (const b of epochs) w.barriers.push(b.epoch);
  const epoch = Math.max(0, ...epochs.map((b) => b.epoch));
  if (!epoch || !w.ack(epoch)) return;
  const b = epochs.find((x) => x.epoch === epoch)!;
  const acks: BarrierAck[] = w.handler.setup.participants.map((p, i) => ({
    epoch,
    stage: p.stage,
    partition: p.partition,
    baseEpoch: b.baseEpoch,
    snapshot: { key: `${job.name}/snapshots/${p.stage}-${p.partition}/${String(epoch).padStart(12, '0')}-test.json`, bytes: 10, entities: 1, full: b.baseEpoch === 0 || b.full.includes(`${p.stage}/${p.partition}`) },
    positions: Object.fromEntries(p.sources.map((s) => [sourcePartitionKey(s, p.partition), epoch * 10])),
    alignedAt: w.now(),
    ackedAt: w.now(),
    ...(w.timers(epoch, i) ? { timers: w.timers(epoch, i) } : {}),
  }));
  await w.handler.acks.put(acks);
}

interface Run {
  readonly result: Carry;
  readonly states: string[];
  readonly children: Carry[];
  readonly childNames: string[];
  /** The carry each state was entered with, in order. */
  readonly inputs: { state: string; input: Carry }[];
  /** The lease as the Probe task found it (before it ran). */
  readonly leaseAtProbe: (Lease | undefined)[];
}

/** One execution of the synthesised definition; `traffic`: touch the activity item after each inject (input keeps coming). */
async function execute(w: World, name: string, input: Partial<Carry>, options: { timing?: CheckpointTimingProps; traffic?: () => boolean } = {}): Promise<Run> {
  const asl = checkpointAsl({ ...TIMING, ...options.timing });
  const machine = new StateMachine(asl as never, { validationOptions: { checkPaths: true, checkArn: true } });
  const children: Carry[] = [];
  const childNames: string[] = [];
  const leaseAtProbe: (Lease | undefined)[] = [];
  const call = (action: string) => async (payload: unknown) => {
    if (action === 'Decide') w.advance(300); // polls are a second apart on AWS
    if (action === 'Probe') {
      leaseAtProbe.push((await w.pointers.read<Lease>(LEASE_NAME))?.value);
      w.advance((payload as { carry: Carry }).carry.wait! * 1000); // the WaitTimers state's wait
    }
    const out = await w.handler(payload);
    // Barriers leave from Inject, and from Resume when it re-opens an interrupted epoch.
    if (action === 'Inject' || action === 'Resume') await playPartitions(w, w.queues);
    if (action === 'Inject' && options.traffic?.()) await w.handler.acks.touch(w.now());
    return out as never;
  };
  const handlers: Record<string, (i: unknown) => Promise<never>> = Object.fromEntries(TASKS.map((t) => [t, call(t)]));
  handlers.ContinueAsNew = async (i) => {
    const p = i as { Name: string; Input: Carry };
    childNames.push(p.Name);
    children.push(p.Input);
    return {} as never;
  };
  const zero = Object.fromEntries(['WaitInterval', 'WaitForAcks', 'Backoff', 'WaitTimers'].map((s) => [s, 0]));
  const run = machine.run(input as never, {
    overrides: { taskResourceLocalHandlers: handlers as never, waitTimeOverrides: zero, retryIntervalOverrides: Object.fromEntries([...TASKS, 'ContinueAsNew'].map((s) => [s, 0])) },
    context: { Execution: { Name: name, Id: `${SM_ARN.replace(':stateMachine:', ':execution:')}:${name}` }, StateMachine: { Id: SM_ARN, Name: 'sluice-checkpoints' } } as never,
  });
  const states: string[] = [];
  const inputs: { state: string; input: Carry }[] = [];
  const collect = (async () => {
    for await (const e of run.eventLogs) {
      if (e.type === 'StateEntered' || e.type === 'StateRetried') states.push(e.type === 'StateRetried' ? `${e.state.name}!retry` : e.state.name);
      if (e.type === 'StateEntered') inputs.push({ state: e.state.name, input: e.state.input as unknown as Carry });
    }
  })();
  const result = (await run.result) as unknown as Carry;
  await collect;
  return { result, states, children, childNames, inputs, leaseAtProbe };
}

async function persisted(w: World) {
  const record = (await w.pointers.read<CoordinatorRecord>(RECORD_NAME))!;
  const pointer = await w.pointers.read<CommitPointer>(POINTER_NAME);
  const lease = (await w.pointers.read<Lease>(LEASE_NAME))?.value;
  return { record: record.value, recordVersion: record.version, pointer: pointer?.value, pointerVersion: pointer?.version ?? 0, lease };
}

const count = (states: readonly string[], name: string) => states.filter((s) => s === name).length;

/** Run `f` and read the epochsAborted values it published in Powertools' embedded metric format (stdout), as CloudWatch files them for the alarm. */
async function withAbortedMetric<T>(f: () => Promise<T>): Promise<{ result: T; aborted: number[] }> {
  const lines: string[] = [];
  const out = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => (lines.push(String(chunk)), true));
  let result: T;
  try {
    result = await f();
  } finally {
    out.mockRestore();
  }
  const emf = lines.flatMap((l) => l.split('\n')).filter((l) => l.startsWith('{"_aws"')).map((l) => JSON.parse(l));
  const aborted = emf.filter((e) => e._aws.CloudWatchMetrics.some((d: { Metrics: { Name: string }[] }) => d.Metrics.some((m) => m.Name === EPOCHS_ABORTED_METRIC)));
  for (const e of aborted) expect(e).toMatchObject({ service: job.name, _aws: { CloudWatchMetrics: [{ Namespace: METRICS_NAMESPACE, Dimensions: [['service']] }] } });
  return { result, aborted: aborted.map((e) => e[EPOCHS_ABORTED_METRIC]) };
}

describe('checkpoint state machine on the local servers', () => {
  it('runs a normal epoch: barriers into every source partition, acks, commit, pointer advanced; then ends idle', async () => {
    const w = await world();
    await w.handler.acks.touch(w.now());
    const run = await execute(w, 'nexmark-q5-1', {});
    expect(run.result.next).toBe('end');
    expect(run.states.slice(0, 11)).toEqual(['Resume', 'AfterResume', 'WaitInterval', 'Open', 'AfterOpen', 'Inject', 'WaitForAcks', 'Decide', 'AfterDecide', 'Commit', 'WaitInterval']);
    // No event-time timers in the acks: the execution ends at the idle Open, nothing waits or probes.
    expect(run.states.slice(11)).toEqual(['Open', 'AfterOpen', 'Done']);
    expect(w.probes).toEqual([]);
    // Barrier 1 went to both partitions of the source stage.
    expect(w.barriers).toEqual([1, 1]);
    const p = await persisted(w);
    expect(p.pointer).toMatchObject({ epoch: 1, manifestKey: manifestObjectKey(job.name, 1) });
    expect(p.pointerVersion).toBe(1);
    expect(p.record).toMatchObject({ highestEpoch: 1, inFlight: null, lastCompleted: { epoch: 1 } });
    expect(p.record.counters).toMatchObject({ opened: 1, completed: 1, aborted: 0, acks: 6 });
    expect(await w.blobs.get(manifestObjectKey(job.name, 1))).toBeDefined();
    // Ending released the lease, so the next input starts an execution at once.
    expect(p.lease).toMatchObject({ owner: null, until: 0 });
    expect(p.lease!.coveredFrom).toBeGreaterThan(0);
  });

  it('aborts an epoch whose acks do not arrive by its deadline, counted in the aborted-epochs alarm\'s metric, then checkpoints with the next one', async () => {
    const w = await world({ ack: (epoch) => epoch > 1, metrics: new Metrics({ namespace: METRICS_NAMESPACE, serviceName: job.name }) });
    await w.handler.acks.touch(w.now());
    const { result: run, aborted } = await withAbortedMetric(() => execute(w, 'nexmark-q5-2', {}));
    expect(aborted).toEqual([1]);
    expect(run.result.next).toBe('end');
    expect(count(run.states, 'Abort')).toBe(1);
    expect(count(run.states, 'Decide')).toBeGreaterThan(2); // polled until the deadline
    expect(count(run.states, 'Commit')).toBe(1);
    const p = await persisted(w);
    expect(p.record.aborted).toEqual([1]);
    expect(p.pointer?.epoch).toBe(2);
    expect(p.record.counters).toMatchObject({ opened: 2, completed: 1, aborted: 1 });
    expect(w.barriers).toEqual([1, 1, 2, 2]);
  });

  it('idle with event-time timers pending: WaitTimers for the seconds the open step computed, the lease released meanwhile, then Probe and an epoch; ends once the acks report none', async () => {
    // Epoch 1's acks: one partition holds a timer 10 s of event time ahead of its watermark (above q5's 5 s idle timeout).
    const w = await world({ timers: (epoch, i) => (epoch === 1 && i === 2 ? { earliest: 20_000, watermark: 10_000 } : undefined) });
    await w.handler.acks.touch(w.now());
    const run = await execute(w, 'nexmark-q5-8', {});
    expect(run.result.next).toBe('end');
    const epoch = ['Inject', 'WaitForAcks', 'Decide', 'AfterDecide', 'Commit', 'WaitInterval', 'Open', 'AfterOpen'];
    expect(run.states).toEqual(['Resume', 'AfterResume', 'WaitInterval', 'Open', 'AfterOpen', ...epoch, 'WaitTimers', 'Probe', 'AfterOpen', ...epoch, 'Done']);
    expect(run.inputs.find((s) => s.state === 'WaitTimers')?.input).toMatchObject({ next: 'timers', wait: 10 });
    // Nobody owns the coordinator during the wait: input arriving then starts an execution at once.
    expect(run.leaseAtProbe).toEqual([expect.objectContaining({ owner: null, until: 0 })]);
    // One probe per source partition, at the clock after the wait, then the barriers of epoch 2 behind them.
    const probedAt = w.probes[0]?.at;
    expect(w.probes.sort((a, b) => a.group.localeCompare(b.group))).toEqual([{ group: '0', at: probedAt }, { group: '1', at: probedAt }]);
    expect(w.barriers).toEqual([1, 1, 2, 2]);
    const p = await persisted(w);
    expect(p.pointer?.epoch).toBe(2);
    expect(p.record.counters).toMatchObject({ opened: 2, completed: 2, aborted: 0 });
    expect(p.lease).toMatchObject({ owner: null, until: 0 });
  });

  it('survives a crash after the pointer write: a retryable one is retried in place, committed once', async () => {
    let crashes = 1;
    const w = await world({ hooks: { 'commit:pointer-written': () => { if (crashes-- > 0) throw new Crash(true, 'commit'); } } });
    await w.handler.acks.touch(w.now());
    const run = await execute(w, 'nexmark-q5-3', {});
    expect(run.result.next).toBe('end');
    expect(run.states).toContain('Commit!retry');
    const p = await persisted(w);
    expect(p.pointer?.epoch).toBe(1);
    expect(p.pointerVersion).toBe(1); // written once
    expect(p.record.counters).toMatchObject({ opened: 1, completed: 1 });
  });

  it('survives a fatal crash between steps: caught, resumed from the control items, nothing lost or committed twice', async () => {
    let crashes = 1;
    const w = await world({ hooks: { 'commit:pointer-written': () => { if (crashes-- > 0) throw new Crash(false, 'commit'); } } });
    await w.handler.acks.touch(w.now());
    const run = await execute(w, 'nexmark-q5-4', {});
    expect(run.result.next).toBe('end');
    expect(run.states).toEqual(expect.arrayContaining(['Commit', 'Backoff']));
    expect(count(run.states, 'Resume')).toBe(2);
    const p = await persisted(w);
    // The resume found the pointer ahead of the record and completed epoch 1 from it.
    expect(p.pointer?.epoch).toBe(1);
    expect(p.pointerVersion).toBe(1);
    expect(p.record.counters).toMatchObject({ opened: 1, completed: 1, aborted: 0 });
    expect(p.record.lastCompleted?.epoch).toBe(1);
  });

  it('resumes an epoch opened before a crash: aborted (its barriers may never have left), the next one re-injected and committed', async () => {
    let crashes = 1;
    const w = await world({ hooks: { 'open:persisted': () => { if (crashes-- > 0) throw new Crash(false, 'open'); } }, metrics: new Metrics({ namespace: METRICS_NAMESPACE, serviceName: job.name }) });
    await w.handler.acks.touch(w.now());
    const { result: run, aborted } = await withAbortedMetric(() => execute(w, 'nexmark-q5-5', {}));
    // The resume's abort counts too.
    expect(aborted).toEqual([1]);
    expect(run.result.next).toBe('end');
    expect(run.states.slice(0, 8)).toEqual(['Resume', 'AfterResume', 'WaitInterval', 'Open', 'Backoff', 'Resume', 'AfterResume', 'WaitForAcks']);
    const p = await persisted(w);
    expect(p.record.aborted).toEqual([1]);
    expect(p.pointer?.epoch).toBe(2);
    expect(p.record.counters).toMatchObject({ completed: 1, aborted: 1 });
    expect(w.barriers).toEqual([2, 2]); // epoch 1's barriers never went out
  });

  it('continues as a new execution after maxEpochs, handing the lease over; a duplicate wake-up ends at once', async () => {
    const w = await world();
    await w.handler.acks.touch(w.now());
    let epochsWithTraffic = 3;
    const traffic = () => epochsWithTraffic-- > 1;
    const first = await execute(w, 'nexmark-q5-6', {}, { timing: { maxEpochs: 2 }, traffic });
    expect(first.result.next).toBe('continue');
    expect(first.states.slice(-3)).toEqual(['AfterOpen', 'ContinueAsNew', 'Done']);
    expect(count(first.states, 'Commit')).toBe(2);
    expect(first.childNames).toEqual(['nexmark-q5-6-g1']);
    expect(first.children[0]).toMatchObject({ g: 1, n: 0, parent: 'nexmark-q5-6' });
    expect((await persisted(w)).lease?.owner).toBe('nexmark-q5-6');

    // A wake-up racing the continuation: the lease is held by a live execution.
    const dup = await execute(w, 'nexmark-q5-7', {}, { timing: { maxEpochs: 2 } });
    expect(dup.states).toEqual(['Resume', 'AfterResume', 'Done']);

    const child = await execute(w, first.childNames[0], first.children[0], { timing: { maxEpochs: 2 }, traffic });
    expect(child.result.next).toBe('end');
    expect(count(child.states, 'Commit')).toBe(1);
    const p = await persisted(w);
    expect(p.pointer?.epoch).toBe(3);
    expect(p.record.counters).toMatchObject({ opened: 3, completed: 3, aborted: 0 });
    expect(p.lease?.owner).toBeNull();
  });
});
