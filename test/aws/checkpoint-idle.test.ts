/**
 * The coordinator at zero traffic (lib/aws/checkpoint/checkpoint-idle.ts, checkpoint-timers.ts): the
 * task actions as the state machine calls them (createCheckpointHandler against DynamoDB
 * Local and fauxqs, a fake clock), partitions played by the test. After an epoch with no
 * input since, the open step releases the lease and either ends (no event-time timers in
 * the last committed epoch's acks: nothing runs) or returns 'timers' with the wait; the
 * probe step then probes every source partition and opens an epoch. The wait's bounds,
 * and which plans get wake-ups at all.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { WatermarkStrategies } from '../../lib/api/types.ts';
import { Windows } from '../../lib/api/windows.ts';
import { barrierOfBody } from '../../lib/aws/checkpoint/checkpoint-barriers.ts';
import { createCheckpointHandler } from '../../lib/aws/checkpoint/checkpoint-handler.ts';
import { DEFAULT_MAX_WAKE_UP_WAIT_MS, timerWakeUpConfig, wakeUpWaitSeconds } from '../../lib/aws/checkpoint/checkpoint-timers.ts';
import { type Carry, LEASE_NAME, type Lease, type Limits } from '../../lib/aws/checkpoint/checkpoint-task.ts';
import { DynamoDbPointerStore } from '../../lib/aws/dynamodb/dynamodb-pointers.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-table.ts';
import { createBucket } from '../../lib/aws/s3/s3-blob-store.ts';
import { decodeBody } from '../../lib/aws/sqs/sqs-codec.ts';
import { createStageQueues, StaticQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { sourcePartitionKey } from '../../lib/checkpoint/protocol.ts';
import { compile } from '../../lib/graph/compile.ts';
import type { AckTimers, BarrierAck } from '../../lib/transport/envelope.ts';
import { drainQueue, localClients, unique } from './helpers.ts';

const clients = localClients();
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

const IDLE_TIMEOUT_MS = 2000;
const LIMITS: Limits = { maxEpochs: 100, maxFailures: 5, leaseMs: 600_000, activityGrainMs: 0, epochTimeoutMs: 60_000 };

interface Click {
  user: string;
  ts: number;
}

/** Clicks counted per user in 1 s tumbling windows, from an ingestion stream of two partitions. */
function windowJob(name: string, idleAdvance?: 'hold' | 'processing-time') {
  const job = new Job(name, { parallelism: 2, maxParallelism: 16 });
  job
    .ingest<Click>('clicks', { timestamp: (c) => c.ts, watermark: WatermarkStrategies.boundedOutOfOrderness(0, { idleTimeoutMs: IDLE_TIMEOUT_MS }), parallelism: 2, ...(idleAdvance ? { idleAdvance } : {}) })
    .keyBy((c) => c.user)
    .window(Windows.tumbling(1000))
    .process<number>((els, _ctx, out) => out.emit(els.length))
    .sinkTo(Sinks.collect(), 'out');
  return job;
}

async function world(name: string, idleAdvance?: 'hold' | 'processing-time') {
  const job = windowJob(name, idleAdvance);
  const plan = compile(job.graph);
  const table = unique('sluice-idle');
  const bucket = unique('idle').toLowerCase();
  const [, , queues] = await Promise.all([createStateTable(clients.dynamodb, table), createBucket(clients.s3, bucket), createStageQueues(clients.sqs, plan, { prefix: `${unique('t')}-` })]);
  let clock = 1_000_000;
  const handler = createCheckpointHandler({ job, ...clients, bucket, tableName: table, queues: new StaticQueues(queues), overrides: { now: () => clock } });
  const pointers = new DynamoDbPointerStore({ client: clients.dynamodb, tableName: table, job: name });
  const sourceStage = plan.edges.find((e) => e.from.kind === 'source')!.toStage;
  const step = (action: string, carry: Partial<Carry>, execution = 'exec-1') => handler({ action, execution, carry, limits: LIMITS });
  /** Take what the Inject step sent, and ack epoch `epoch` for every participant (`timers` per participant index). */
  const ackAll = async (epoch: number, timers: (i: number) => AckTimers | undefined = () => undefined) => {
    const sent = await drainQueue(clients.sqs, queues[sourceStage].url);
    const barrier = sent.map((m) => barrierOfBody(m.Body!)).find((b) => b?.epoch === epoch);
    expect(barrier, `epoch ${epoch}'s barriers on the source queue`).toBeDefined();
    const acks: BarrierAck[] = handler.setup.participants.map((p, i) => ({
      epoch,
      stage: p.stage,
      partition: p.partition,
      baseEpoch: barrier!.baseEpoch,
      snapshot: { key: `${name}/snapshots/${p.stage}-${p.partition}/${String(epoch).padStart(12, '0')}-t.json`, bytes: 10, entities: 1, full: true },
      positions: Object.fromEntries(p.sources.map((s) => [sourcePartitionKey(s, p.partition), epoch * 10])),
      alignedAt: clock,
      ackedAt: clock,
      ...(timers(i) ? { timers: timers(i) } : {}),
    }));
    await handler.acks.put(acks);
    return sent;
  };
  /** One epoch of input: touch, open, inject, ack (with `timers`), decide, commit. */
  const epoch = async (c: Carry, timers?: (i: number) => AckTimers | undefined): Promise<Carry> => {
    await handler.acks.touch(clock++);
    clock += 1000;
    const opened = await step('open', c);
    expect(opened.next).toBe('inject');
    const injected = await step('inject', opened);
    await ackAll(injected.epoch, timers);
    const decided = await step('decide', injected);
    expect(decided.next).toBe('commit');
    const committed = await step('commit', decided);
    expect(committed.next).toBe('wait');
    clock += 1000;
    return committed;
  };
  const lease = async () => (await pointers.read<Lease>(LEASE_NAME))?.value;
  const sourceMessages = () => drainQueue(clients.sqs, queues[sourceStage].url);
  return { handler, plan, step, epoch, ackAll, lease, sourceMessages, advance: (ms: number) => (clock += ms), now: () => clock };
}

describe('the coordinator at zero traffic', () => {
  it('no timers pending and no input: the open step releases the lease and ends, and sends nothing', async () => {
    const w = await world('idle-end');
    const resumed = await w.step('resume', {});
    expect(resumed.next).toBe('wait');
    const after = await w.epoch(resumed);
    const idle = await w.step('open', after);
    expect(idle.next).toBe('end');
    expect(idle.wait).toBeUndefined();
    expect(await w.lease()).toMatchObject({ owner: null, until: 0 });
    expect(await w.sourceMessages()).toEqual([]);
  });

  it('timers pending: the open step waits (lease released) until the watermark reaches the earliest timer, then the probe step probes every source partition and opens an epoch', async () => {
    const w = await world('idle-timers');
    const resumed = await w.step('resume', {});
    // One partition (the window stage's) holds a timer 5 s of event time ahead of its watermark.
    const windowStage = w.handler.setup.participants.findIndex((p) => p.sources.length === 0);
    const after = await w.epoch(resumed, (i) => (i === windowStage ? { earliest: 15_999, watermark: 10_999 } : undefined));
    const idle = await w.step('open', after);
    expect(idle).toMatchObject({ next: 'timers', wait: 5 });
    // Released for the wait: input meanwhile starts an execution at once (checkpoint-wakeup.ts).
    expect(await w.lease()).toMatchObject({ owner: null, until: 0 });
    expect(await w.sourceMessages()).toEqual([]);

    w.advance(5000);
    const probed = await w.step('probe', idle);
    expect(probed.next).toBe('inject');
    expect(probed.epoch).toBe(after.epoch + 1);
    expect((await w.lease())?.owner).toBe('exec-1');
    const probes = (await w.sourceMessages()).map((m) => ({ group: m.Attributes?.MessageGroupId, body: decodeBody(m.Body!) }));
    // One probe per source partition, stamped with the coordinator's clock, ahead of the epoch's barriers (Inject sends those).
    expect(probes).toEqual([0, 1].map((p) => ({ group: String(p), body: { v: 1, k: 'i', s: 'clicks', at: w.now(), r: [], probe: true } })));

    // The epoch that carries the probes commits; its acks say the timers fired: the next open ends.
    const injected = await w.step('inject', probed);
    await w.ackAll(injected.epoch);
    const committed = await w.step('commit', await w.step('decide', injected));
    expect(committed.next).toBe('wait');
    expect((await w.step('open', committed)).next).toBe('end');
  });

  it('input that arrives while the lease is released is seen by the same open step: it carries on instead of waiting', async () => {
    const w = await world('idle-race');
    const resumed = await w.step('resume', {});
    const after = await w.epoch(resumed, () => ({ earliest: 15_999, watermark: 10_999 }));
    // The open step reads the activity twice: before opening (none), and after releasing the lease.
    const acks = w.handler.acks;
    const read = acks.lastActivity.bind(acks);
    let reads = 0;
    acks.lastActivity = async () => {
      if (++reads === 2) await acks.touch(w.now());
      return read();
    };
    try {
      const next = await w.step('open', after);
      expect(reads).toBe(2);
      expect(next.next).toBe('wait');
    } finally {
      acks.lastActivity = read;
    }
  });

  it('a probe step whose lease another execution took meanwhile (input woke one) ends and sends no probe', async () => {
    const w = await world('idle-taken');
    const resumed = await w.step('resume', {});
    const after = await w.epoch(resumed, () => ({ earliest: 15_999, watermark: 10_999 }));
    const idle = await w.step('open', after);
    expect(idle.next).toBe('timers');
    await w.handler.acks.touch(w.now());
    expect((await w.step('open', idle, 'exec-2')).next).toBe('inject');
    w.advance(5000);
    expect((await w.step('probe', idle)).next).toBe('end');
    expect((await w.lease())?.owner).toBe('exec-2');
    const bodies = (await w.sourceMessages()).map((m) => decodeBody(m.Body!));
    expect(bodies.filter((b) => b.k === 'i')).toEqual([]);
  });

  it('a job whose sources hold their watermark while idle gets no wake-ups: timers pending or not, idle ends', async () => {
    const w = await world('idle-hold', 'hold');
    const resumed = await w.step('resume', {});
    const after = await w.epoch(resumed, () => ({ earliest: 15_999, watermark: 10_999 }));
    expect((await w.step('open', after)).next).toBe('end');
  });
});

describe('wake-up settings and wait', () => {
  const config = { idleTimeoutMs: IDLE_TIMEOUT_MS, maxWaitMs: DEFAULT_MAX_WAKE_UP_WAIT_MS };
  it('waits until the earliest timer over the partitions is due, within the idle timeout and the longest wait, in whole seconds', () => {
    expect(wakeUpWaitSeconds([], config)).toBeUndefined();
    expect(wakeUpWaitSeconds([{}, {}], config)).toBeUndefined();
    expect(wakeUpWaitSeconds([{ timers: { earliest: 15_999, watermark: 10_999 } }], config)).toBe(5);
    // The partition needing the least processing time decides; a fraction rounds up.
    expect(wakeUpWaitSeconds([{ timers: { earliest: 20_000, watermark: 10_000 } }, {}, { timers: { earliest: 13_500, watermark: 10_000 } }], config)).toBe(4);
    // Due already, or due sooner than the idle timeout: the idle timeout (the probes must find every partition idle).
    expect(wakeUpWaitSeconds([{ timers: { earliest: 9000, watermark: 10_000 } }], config)).toBe(2);
    expect(wakeUpWaitSeconds([{ timers: { earliest: 10_500, watermark: 10_000 } }], config)).toBe(2);
    // Far ahead: approached in steps of the longest wait.
    expect(wakeUpWaitSeconds([{ timers: { earliest: 10 * 3_600_000, watermark: 0 } }], config)).toBe(3600);
    // A watermark not finite yet (an input never idle): the idle timeout, after which the probes idle it.
    expect(wakeUpWaitSeconds([{ timers: { earliest: 5000, watermark: Number.NEGATIVE_INFINITY } }], config)).toBe(2);
    expect(wakeUpWaitSeconds([{ timers: { earliest: 1, watermark: 0 } }], { idleTimeoutMs: 0, maxWaitMs: 0 })).toBe(1);
  });

  it('wakes jobs with an ingestion stream that advances while idle; the longest wait is at least the idle timeout', () => {
    expect(timerWakeUpConfig(compile(windowJob('a').graph))).toEqual({ idleTimeoutMs: IDLE_TIMEOUT_MS, maxWaitMs: DEFAULT_MAX_WAKE_UP_WAIT_MS });
    expect(timerWakeUpConfig(compile(windowJob('b').graph), 500)).toEqual({ idleTimeoutMs: IDLE_TIMEOUT_MS, maxWaitMs: IDLE_TIMEOUT_MS });
    expect(timerWakeUpConfig(compile(windowJob('c', 'hold').graph))).toBeUndefined();
    const bounded = new Job('d', { parallelism: 2 });
    bounded
      .fromItems<Click>('clicks', [], { timestamp: (c) => c.ts, watermark: WatermarkStrategies.boundedOutOfOrderness(0, { idleTimeoutMs: 1000 }) })
      .keyBy((c) => c.user)
      .window(Windows.tumbling(1000))
      .process<number>((els, _ctx, out) => out.emit(els.length))
      .sinkTo(Sinks.collect(), 'out');
    expect(timerWakeUpConfig(compile(bounded.graph))).toBeUndefined();
  });
});
