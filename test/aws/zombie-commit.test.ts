/**
 * Zombie commits through the real operator handlers (DynamoDB Local and fauxqs): a warm
 * container A, which has the keyed stage's partition cached, processes a batch and is
 * held just before its commit (a long GC pause, a frozen Lambda sandbox); the batch's
 * visibility runs out, container B gets the same messages, commits them and then the next
 * batch; A is released and sends its commit, which is now two versions stale.
 *
 * The commit must have no effect: the version fence fails its transaction, A reopens the
 * partition, finds the batch already applied and commits nothing new; the job's output
 * equals the embedded runtime's by the checker and nothing reaches a DLQ. (A zombie
 * finishing a redo-logged batch, over DynamoDB's 100-item transaction limit, is the
 * backend's case: test/aws/dynamodb-faults.test.ts.)
 */
import { describe, expect, inject, it } from 'vitest';
import type { SQSClient } from '@aws-sdk/client-sqs';
import type { StageQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { embeddedOutput } from '../support/fault-runs.ts';
import { createRig } from '../support/handler-rig.ts';
import { applyAnswer, type InvocationControl, invocations, runStorm, type StormHandler, withReceives } from '../support/storm-driver.ts';
import { receive, sqsEvent } from './helpers.ts';
import { poisonEvents, poisonJob, poisonOperator } from './poison-jobs.ts';

const servers = { region: inject('awsRegion'), credentials: inject('awsCredentials'), dynamodb: inject('dynamodbEndpoint'), sqs: inject('fauxqsEndpoint') };

const events = poisonEvents(7, 1200).filter((e) => poisonOperator(e) === undefined);
const sources = { events: { kind: 'items', items: events } } as const;

const make = () => poisonJob({ parallelism: 1 });

/** One receive of a stage queue through `handler` (under `ctl`), its answer applied; undefined when the queue had nothing. */
async function step(sqs: SQSClient, q: StageQueues, handler: StormHandler, ctl: InvocationControl = { calls: 0 }) {
  const batch = await receive(sqs, q.url);
  if (!batch.length) return undefined;
  const answer = await invocations.run(ctl, () => handler(sqsEvent(batch, q.arn)));
  await applyAnswer(sqs, q, batch, answer);
  return { batch, answer };
}

describe('zombie commits on the AWS path', () => {
  it('a commit from an earlier owner arriving after two newer ones has no effect', async () => {
    const expected = await embeddedOutput(make, sources, 'out');
    const rig = await createRig(make, { servers, sinkName: 'out', seed: 1 });
    try {
      await rig.feed(sources, 4);
      const sqs = rig.clean.sqs;
      const [source, keyed] = rig.queues;
      const upstream = rig.container(0);
      while (await step(sqs, source, upstream));

      const a = rig.container(1);
      const b = rig.container(1);
      expect(await step(sqs, keyed, a), 'A caches the partition').toBeDefined();

      // A takes the next batch and stops just before its commit.
      const batch = await receive(sqs, keyed.url);
      expect(batch.length).toBeGreaterThan(0);
      let heldNow!: () => void;
      const held = new Promise<void>((r) => (heldNow = r));
      let release!: () => void;
      const released = new Promise<void>((r) => (release = r));
      const zombie: InvocationControl = { calls: 0, holdBefore: 'TransactWriteItemsCommand', onHeld: heldNow, release: released, outcomes: [] };
      const zombieAnswer = invocations.run(zombie, () => a(sqsEvent(batch, keyed.arn)));
      await held;

      // Its visibility runs out: B gets the same messages and commits them, then the next batch.
      const first = await invocations.run({ calls: 0 }, () => b({ Records: withReceives(sqsEvent(batch, keyed.arn).Records, 1) }));
      expect(first.batchItemFailures).toEqual([]);
      await applyAnswer(sqs, keyed, batch, first);
      const next = await step(sqs, keyed, b);
      expect(next?.answer.batchItemFailures, 'B commits a second batch').toEqual([]);

      release();
      const answer = await zombieAnswer;
      const commits = zombie.outcomes!.filter((o) => o.command === 'TransactWriteItemsCommand');
      expect(commits[0], "A's held commit is fenced").toEqual({ command: 'TransactWriteItemsCommand', error: 'TransactionCanceledException' });
      expect(answer.batchItemFailures, 'A reopened, found its batch applied and committed nothing new').toEqual([]);

      await runStorm({ seed: 1, sqs, queues: rig.queues, container: rig.container, warm: 1, duplicateRate: 0, overlapRate: 0 });
      assertExactlyOnce(expected, rig.sink.records, { label: 'zombie commit', input: events });
      expect(await rig.deadLetters(), 'dead letters').toEqual([]);
    } finally {
      rig.close();
    }
  }, 120_000);
});
