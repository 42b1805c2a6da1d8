/**
 * A bounded run ends with the checkpoint after its last record, which commits the
 * transactional output. When that epoch times out (an ack never came), the run opens
 * another rather than waiting forever for the aborted one.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { openCheckpointedRuntime } from '../../lib/local/checkpointing.ts';
import { CommittedFileSink } from '../../lib/local/committed-sink.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { lines, payments, tmp, totalsJob, totalsOrder } from './jobs.ts';

describe('the final checkpoint of a bounded run', () => {
  it('times out without its acks: another epoch commits the output and the run ends', async () => {
    const dir = tmp('sluice-final-abort-');
    const file = join(dir, 'out.jsonl');
    const sink = new CommittedFileSink(file, join(dir, 'sinks', 'out'), false);
    const { runtime, checkpoints } = await openCheckpointedRuntime(totalsJob(payments(500), sink), { sinks: { out: sink }, sourceBatchSize: 64 }, { dir, intervalMs: 0, timeoutMs: 500, sinks: [sink], durable: false });
    // Epoch 1 (the final one: no periodic epochs) loses every ack, as if its barriers were lost.
    const onAck = checkpoints.onAck.bind(checkpoints);
    checkpoints.onAck = (ack) => {
      if (ack.epoch !== 1) onAck(ack);
    };
    const ended = await Promise.race([runtime.run().then(() => true), new Promise<false>((r) => setTimeout(() => r(false), 10_000).unref())]);
    if (!ended) runtime.stop();
    expect(ended, 'the run ended').toBe(true);
    expect(checkpoints.driver.aborted).toContain(1);
    expect(checkpoints.driver.state.lastCompleted?.epoch).toBeGreaterThan(1);
    const reference = Sinks.collect<unknown>();
    await runJob(totalsJob(payments(500), reference), { sourceBatchSize: 64 });
    assertExactlyOnce(reference.records, lines(file).map((l) => JSON.parse(l)), { orderKey: totalsOrder });
    checkpoints.close();
  });
});
