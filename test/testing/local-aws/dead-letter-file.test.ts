/**
 * The local-AWS dead-letter file (lib/testing/local-aws/dead-letter-file.ts) against fauxqs: a
 * resume from checkpoint E takes from the DLQs the letters of epochs up to E and drops
 * later ones (their records are replayed and parked again), keeps a message SQS moved
 * whole, keeps what the file held up to E, and empties the DLQs; a letter delivered
 * twice is stored once; a fresh run starts with an empty file.
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, describe, expect, it } from 'vitest';
import { Sinks } from '../../../lib/api/sinks.ts';
import { Job } from '../../../lib/api/stream.ts';
import { AwsAccounting } from '../../../lib/aws/cost/accounting.ts';
import { LocalAwsDeadLetters } from '../../../lib/testing/local-aws/dead-letter-file.ts';
import { queueDepth } from '../../../lib/testing/local-aws/queues.ts';
import type { DeadLetterMessage } from '../../../lib/aws/sqs/sqs-codec.ts';
import { createStageQueues, StaticQueues } from '../../../lib/aws/sqs/sqs-queues.ts';
import { SqsTransport } from '../../../lib/aws/sqs/sqs-transport.ts';
import { compile } from '../../../lib/graph/compile.ts';
import { localClients, unique } from '../../aws/helpers.ts';

const clients = localClients();
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

describe('local-AWS dead-letter file', () => {
  it('a resume keeps letters of epochs up to the restored checkpoint and whole messages, drops later ones, each once', async () => {
    const name = unique('dlf');
    const job = new Job(name, { parallelism: 2 });
    job.ingest<{ n: number }>('events').keyBy((e) => e.n % 2).process({ processElement: (e, ctx) => ctx.emit(e) }).name('m').sinkTo(Sinks.collect(), 'out');
    const plan = compile(job.graph);
    const queues = await createStageQueues(clients.sqs, plan, { prefix: `${name}-` });
    const transport = new SqsTransport({ sqs: clients.sqs, job: name, queues: new StaticQueues(queues) });
    const letter = (n: number, epoch: number, partition = 0): DeadLetterMessage => ({ job: name, stage: 1, partition, epoch, operator: 'm', channel: '1:0', seq: n, index: 0, record: { value: { n }, timestamp: 0 }, error: `refused ${n}`, attempts: 3 });
    const dir = mkdtempSync(join(tmpdir(), 'sluice-dlf-'));
    const overhead = new AwsAccounting();

    // A fresh run: letters of epochs 1 and 2 reach the file at its end.
    const fresh = LocalAwsDeadLetters.open(dir, name, 'fresh');
    await transport.sendDeadLetters([letter(1, 1), letter(2, 2), letter(2, 2, 1)]);
    await fresh.drain(clients.sqs, queues, overhead);
    fresh.close();
    const at = (ds: readonly { seq?: number; partition: number; epoch?: number }[]) => ds.map((d) => [d.seq, d.partition, d.epoch]).sort();
    expect(at(fresh.reports())).toEqual([[1, 0, 1], [2, 0, 2], [2, 1, 2]]);

    // Then the run is killed with letters of epochs 2 and 4 on the DLQ (one twice, as a redelivered outbox sends it) and a message SQS moved whole.
    await transport.sendDeadLetters([letter(3, 2), letter(4, 4)]);
    await transport.sendDeadLetters([letter(3, 2)]);
    await clients.sqs.send(new SendMessageCommand({ QueueUrl: queues[1].dlqUrl, MessageBody: 'not a sluice message', MessageGroupId: '1', MessageDeduplicationId: unique('g') }));

    // Resumed from checkpoint 2: epochs up to 2 and the whole message stay, epoch 4 is parked again by the replay.
    const resumed = LocalAwsDeadLetters.open(dir, name, 2);
    await resumed.drain(clients.sqs, queues, overhead, 2);
    resumed.close();
    const kept = resumed.reports();
    expect(at(kept.filter((d) => d.operator === 'm'))).toEqual([[1, 0, 1], [2, 0, 2], [2, 1, 2], [3, 0, 2]]);
    const whole = kept.filter((d) => d.operator !== 'm');
    expect(whole).toHaveLength(1);
    expect(whole[0]).toMatchObject({ operator: '(stage 1 message)', stage: 1, partition: 1, epoch: 0, record: { value: 'not a sluice message' } });
    expect(whole[0].error).toMatch(/moved the whole message/);
    for (const q of queues) expect((await queueDepth(clients.sqs, q.dlqUrl)).visible).toBe(0);
    // The file holds exactly that, each once.
    const lines = readFileSync(resumed.path, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    expect(lines.map((d) => d.id).sort()).toEqual(kept.map((d) => d.id).sort());

    // Resumed again from checkpoint 1: only epoch 1 and the whole message remain.
    const again = LocalAwsDeadLetters.open(dir, name, 1);
    again.close();
    expect(again.reports().map((d) => [d.operator, d.seq, d.epoch]).sort()).toEqual([['(stage 1 message)', 0, 0], ['m', 1, 1]]);
    // A fresh run of the directory starts empty.
    expect(LocalAwsDeadLetters.open(dir, name, 'fresh').reports()).toEqual([]);
  });
});
