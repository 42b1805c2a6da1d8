/**
 * The batch runner both runtimes share (lib/runtime/batch-runner.ts): the one delivery
 * order of an outbox, sink-refused records parked as dead letters, attempts counted up to
 * maxAttempts and the location parked by the next run, a recovered outbox delivered and
 * then cleared, and an attempt counter that fails reported as such.
 */
import { describe, expect, it } from 'vitest';
import { CollectSink, type Sink, type SinkBatch, SinkRecordsRejectedError } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { compile } from '../../lib/graph/compile.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { type AttemptCounter, BatchRunner, MemoryAttempts, type OutboxPorts } from '../../lib/runtime/batch-runner.ts';
import { deliverOutbox } from '../../lib/runtime/batch-runner-outbox.ts';
import { type ParkedFailure, PartitionRuntime } from '../../lib/runtime/partition.ts';
import { InMemoryStateBackend } from '../../lib/state/memory.ts';
import type { BarrierAck, Envelope, OutboxEntry, SinkDelivery } from '../../lib/transport/envelope.ts';

const env = (seq: number, records: number[] = []): Envelope => ({ channel: '0:0', edge: 0, toPartition: 0, seq, records: records.map((value) => ({ value, timestamp: 0 })), watermark: Number.NEGATIVE_INFINITY });
const sink = (seq: number, records: unknown[] = [seq]): SinkDelivery => ({ sink: 'out', producer: '1/0', seq, records });
const ack = (epoch: number) => ({ epoch, stage: 1, partition: 0, baseEpoch: 0, snapshot: null, positions: {}, alignedAt: 0, ackedAt: 0 }) as BarrierAck;

/** Ports that log each call as one line; sinks asynchronous (each a promise), or throwing what `refuse` returns. */
function recordingPorts(refuse?: (d: SinkDelivery) => Error | undefined): { ports: OutboxPorts; calls: string[] } {
  const calls: string[] = [];
  const ports: OutboxPorts = {
    channels: (envs) => void calls.push(`channels ${envs.map((e) => e.seq).join(',')}`),
    deadLetters: (letters) => void calls.push(`letters ${letters.map((l) => `${l.letter.operator}:${l.letter.index}@${l.epoch}`).join(',')}`),
    sink: async (d) => {
      await new Promise((r) => setTimeout(r, 1));
      const e = refuse?.(d);
      if (e) throw e;
      calls.push(`sink ${d.seq}`);
    },
    acks: (acks) => void calls.push(`acks ${acks.map((a) => a.epoch).join(',')}`),
    sinkRejected: (e) => void calls.push(`rejected ${e.sink}#${e.seq}`),
  };
  return { ports, calls };
}

describe('outbox delivery', () => {
  it('channels, dead letters and sinks each in outbox order, the acks after all of them', async () => {
    const outbox: OutboxEntry[] = [
      { kind: 'channel', envelope: env(1) },
      { kind: 'sink', delivery: sink(1) },
      { kind: 'deadLetter', deadLetter: { operator: 'op', channel: '0:0', seq: 1, index: 0, error: 'x', attempts: 3 } },
      { kind: 'ack', ack: ack(4) },
      { kind: 'channel', envelope: env(2) },
      { kind: 'sink', delivery: sink(2) },
      { kind: 'deadLetter', deadLetter: { operator: 'op', channel: '0:0', seq: 2, index: 5, error: 'y', attempts: 3 } },
    ];
    const { ports, calls } = recordingPorts();
    await deliverOutbox(ports, outbox, 4);
    // The first letter is before the ack of epoch 4; the second after the last ack: epoch lastBarrier + 1.
    expect(calls).toEqual(['channels 1,2', 'letters op:0@4,op:5@5', 'sink 1', 'sink 2', 'acks 4']);
  });

  it('synchronous ports: nothing to await', () => {
    const calls: string[] = [];
    const ports: OutboxPorts = { channels: () => void calls.push('c'), deadLetters: () => void calls.push('d'), sink: () => void calls.push('s'), acks: () => void calls.push('a') };
    expect(deliverOutbox(ports, [{ kind: 'ack', ack: ack(1) }, { kind: 'sink', delivery: sink(1) }, { kind: 'channel', envelope: env(1) }], 0)).toBeUndefined();
    expect(calls).toEqual(['c', 's', 'a']);
    expect(deliverOutbox(ports, [], 0)).toBeUndefined();
  });

  it('records a sink refuses are parked with its error; the rest of the outbox goes on; any other sink error fails the delivery before the acks', async () => {
    const outbox: OutboxEntry[] = [{ kind: 'sink', delivery: sink(1, ['a', 'b', 'c']) }, { kind: 'sink', delivery: sink(2) }, { kind: 'ack', ack: ack(2) }];
    const rejecting = recordingPorts((d) => (d.seq === 1 ? new SinkRecordsRejectedError('out', d.producer, d.seq, [{ index: 1, record: 'b', error: 'no key' }]) : undefined));
    const letters: unknown[] = [];
    const deadLetters = rejecting.ports.deadLetters;
    rejecting.ports.deadLetters = (l) => {
      letters.push(...l);
      return deadLetters(l);
    };
    await deliverOutbox(rejecting.ports, outbox, 1);
    expect(rejecting.calls).toEqual(['rejected out#1', 'letters out:1@2', 'sink 2', 'acks 2']);
    expect(letters).toEqual([{ letter: { operator: 'out', channel: 'sink:1/0', seq: 1, index: 1, record: { value: 'b', timestamp: Number.NaN }, error: 'no key', attempts: 1 }, epoch: 2 }]);

    const failing = recordingPorts((d) => (d.seq === 1 ? new Error('disk full') : undefined));
    await expect(deliverOutbox(failing.ports, outbox, 1)).rejects.toThrow('disk full');
    expect(failing.calls).toEqual([]);
  });
});

/** One stage: `poison` throws in user code; everything else goes to the sink. */
function poisonJob(poison: number) {
  const job = new Job('runner', { parallelism: 1 });
  job
    .ingest<number>('in', { timestamp: () => 0 })
    .map((n) => {
      if (n === poison) throw new Error(`poison ${n}`);
      return n;
    })
    .name('check')
    .sinkTo(new CollectSink<number>(), 'out');
  return job;
}

function runnerOf(job: Job, attempts: AttemptCounter, ports?: OutboxPorts) {
  const plan = compile(job.graph);
  const backend = new InMemoryStateBackend();
  const delivered: SinkDelivery[] = [];
  const letters: unknown[] = [];
  const outbox: OutboxPorts = ports ?? { channels: () => {}, deadLetters: (l) => void letters.push(...l), sink: (d) => void delivered.push(d), acks: () => {} };
  const runner = new BatchRunner({ open: () => PartitionRuntime.open({ plan, stage: 0, partition: 0, backend, clock: new ManualClock(0) }), outbox, attempts, maxAttempts: 3 });
  return { runner, delivered, letters, backend };
}

describe('batch runner', () => {
  it('counts attempts of a failing record, parks it at maxAttempts, then forgets its count', async () => {
    const counts = new MemoryAttempts();
    const { runner, delivered, letters } = runnerOf(poisonJob(2), counts);
    const skip = new Map<string, ParkedFailure>();
    const input = [env(1, [1, 2, 3])];
    for (let attempt = 1; attempt <= 3; attempt++) {
      const out = await runner.run(input, skip);
      expect(out.ok).toBe(false);
      if (out.ok) return;
      expect(out.retryable).toBe(true);
      expect(out.failed).toMatchObject({ id: '0:0#1#1', attempts: attempt, parked: attempt === 3, failure: { operator: 'check', error: 'operator "check" threw: poison 2' } });
      expect(runner.isOpen).toBe(false);
    }
    expect([...skip.keys()]).toEqual(['0:0#1#1']);
    const out = await runner.run(input, skip);
    expect(out.ok && out.result.parked).toEqual(['0:0#1#1']);
    expect(skip.size).toBe(0);
    expect(counts.failed('0:0#1#1', { error: 'x' }, 3)).toBe(1); // forgotten once parked
    expect(delivered.flatMap((d) => d.records)).toEqual([1, 3]);
    expect(letters).toMatchObject([{ letter: { operator: 'check', index: 1, attempts: 3, record: { value: 2 } }, epoch: 1 }]);
  });

  it('parks at once when the caller says so (a message at the receive limit)', async () => {
    const { runner } = runnerOf(poisonJob(1), new MemoryAttempts());
    const skip = new Map<string, ParkedFailure>();
    const out = await runner.run([env(1, [1])], skip, () => true);
    expect(!out.ok && out.failed).toMatchObject({ attempts: 1, parked: true });
    expect(skip.get('0:0#1#0')).toMatchObject({ attempts: 1, operator: 'check' });
  });

  it('reports an attempt counter that fails, with its error, and parks nothing', async () => {
    const broken: AttemptCounter = {
      failed: () => Promise.reject(new Error('throttled')),
      forget: () => {},
    };
    const { runner } = runnerOf(poisonJob(1), broken);
    const skip = new Map<string, ParkedFailure>();
    const out = await runner.run([env(1, [1])], skip);
    expect(out.ok).toBe(false);
    if (out.ok) return;
    expect((out.error as Error).message).toBe('throttled');
    expect(out.failed).toMatchObject({ id: '0:0#1#0', parked: false });
    expect(out.failed?.attempts).toBeUndefined();
    expect(skip.size).toBe(0);
  });

  it('open() delivers the outbox a failed delivery left, then clears it', async () => {
    let fail = true;
    const delivered: number[] = [];
    const ports: OutboxPorts = {
      channels: () => {},
      deadLetters: () => {},
      sink: (d) => {
        if (fail) throw new Error('sink down');
        delivered.push(...(d.records as number[]));
      },
      acks: () => {},
    };
    const { runner, backend } = runnerOf(poisonJob(-1), new MemoryAttempts(), ports);
    const out = await runner.run([env(1, [5, 6])], new Map());
    expect(!out.ok && (out.error as Error).message).toBe('sink down');
    expect(!out.ok && out.retryable).toBe(false);
    fail = false;
    const rt = await runner.open();
    expect(delivered).toEqual([5, 6]);
    expect(rt.recoveredOutbox.length).toBeGreaterThan(0);
    expect((await backend.recover({ job: 'runner', stage: 0, partition: 0 })).outbox).toEqual([]);
  });
});

describe('sink-refused records on the embedded runtime', () => {
  it('are dead letters with the sink\'s error; the run goes on and every other record is written once', async () => {
    const written: number[] = [];
    const picky: Sink<number> = {
      kind: 'picky',
      write(batch: SinkBatch<number>) {
        const rejected = batch.records.flatMap((r, index) => (r % 10 === 7 ? [{ index, record: r, error: `no ${r}` }] : []));
        written.push(...batch.records.filter((r) => r % 10 !== 7));
        if (rejected.length) throw new SinkRecordsRejectedError('out', batch.producer, batch.seq, rejected);
      },
    };
    const job = new Job('refused', { parallelism: 1 });
    job.fromItems('in', Array.from({ length: 30 }, (_, i) => i)).sinkTo(new CollectSink<number>(), 'out');
    const { stats, runtime } = await runJob(job, { sourceBatchSize: 4, sinks: { out: picky } });
    expect(written.sort((a, b) => a - b)).toEqual(Array.from({ length: 30 }, (_, i) => i).filter((r) => r % 10 !== 7));
    expect(runtime.deadLetters.map((d) => [d.operator, d.channel?.startsWith('sink:'), d.record?.value, d.error])).toEqual([7, 17, 27].map((r) => ['out', true, r, `no ${r}`]));
    expect(stats.deadLetters).toBe(3);
  });
});
