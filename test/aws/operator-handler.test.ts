/**
 * The operator Lambda handler end to end against fauxqs and DynamoDB Local: events go
 * in through the ingest handler, every stage runs as its own function fed by its FIFO
 * queue (driven like Lambda's event source mapping, from real ReceiveMessage results),
 * and the sink output must equal the embedded runtime's on the same input:
 * - with warm containers that go stale (two per stage, used in turn);
 * - under seeded crashes at every boundary between two AWS calls of the handler
 *   (before/after the commit, the SQS sends, clearing the outbox, and losing the answer
 *   just before returning), with zero duplicates and zero losses.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { SQSClient } from '@aws-sdk/client-sqs';
import type { Logger } from '@aws-lambda-powertools/logger';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { CollectSink } from '../../lib/api/sinks.ts';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { createIngestHandler } from '../../lib/aws/ingest/ingest-handler.ts';
import { apiEvent } from '../../lib/testing/local-aws/feeder.ts';
import { createOperatorHandler } from '../../lib/aws/operator/operator-handler.ts';
import { createStageQueues, StaticQueues, type StageQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { SqsTransport } from '../../lib/aws/sqs/sqs-transport.ts';
import { InjectedCrash } from '../../lib/errors.ts';
import { compile } from '../../lib/graph/compile.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { Rng } from '../../lib/nexmark/random.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { CLICKS, clickJob, type Count, type Running, USERS } from './click-job.ts';
import { type Container, localClients, runUntilDrained, unique } from './helpers.ts';

const clicks = CLICKS;
const clients = localClients();
const table = unique('sluice-ops');
let reference: { running: unknown[]; windows: unknown[] };

beforeAll(async () => {
  await createStateTable(clients.dynamodb, table);
  const running = new CollectSink<Running>();
  const windows = new CollectSink<Count>();
  await runJob(clickJob('reference'), { sources: { clicks: { kind: 'items', items: clicks } }, sinks: { 'running-out': running, 'window-out': windows } });
  reference = { running: running.records, windows: windows.records };
  expect(reference.running).toHaveLength(60);
  expect(reference.windows.length).toBeGreaterThan(5);
});
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

/** An HTTP API request carrying these clicks. */
const post = (body: unknown) => apiEvent('clicks', JSON.stringify(body));

interface Crash {
  readonly command: string;
  readonly when: 'before' | 'after';
  /** Crash at the nth call of the command (counted over the whole run). */
  readonly nth: number;
}

/** Clients of one container whose calls pass through the crash plan; once crashed, every call fails (the process is gone). */
function containerClients(plan: Crash[], calls: Map<string, number>, fired: Crash[]) {
  const box = { dead: false };
  const common = { region: inject('awsRegion'), credentials: inject('awsCredentials') };
  const sqs = new SQSClient({ ...common, endpoint: inject('fauxqsEndpoint') });
  const dynamodb = new DynamoDBClient({ ...common, endpoint: inject('dynamodbEndpoint') });
  for (const client of [sqs, dynamodb] as { middlewareStack: SQSClient['middlewareStack'] }[]) {
    client.middlewareStack.add(
      (next, context) => async (args) => {
        if (box.dead) throw new InjectedCrash('process gone');
        const name = context.commandName ?? '?';
        const n = (calls.get(name) ?? 0) + 1;
        calls.set(name, n);
        const hit = (when: Crash['when']) => {
          const c = plan.find((x) => x.command === name && x.when === when && x.nth === n);
          if (!c) return;
          fired.push(c);
          box.dead = true;
          throw new InjectedCrash(`${when} ${name} #${n}`);
        };
        hit('before');
        const out = await next(args);
        hit('after');
        return out;
      },
      { step: 'initialize', name: 'crashPlan' },
    );
  }
  return { sqs, dynamodb, box };
}

/** Run the whole job on the handlers; returns the sink outputs. */
async function runOnAws(options: { crashes?: Crash[]; loseAnswer?: () => boolean; warm?: number; combineWindows?: boolean } = {}) {
  const logged: string[] = [];
  const note = (message: string) => logged.push(message);
  const logger = { info: note, warn: note, error: note } as unknown as Logger;
  const job = clickJob(unique('op'), { combineWindows: options.combineWindows });
  const queues: StageQueues[] = await createStageQueues(clients.sqs, compile(job.graph), { visibilityTimeoutSeconds: 300 });
  const staticQueues = new StaticQueues(queues);
  const sinks = { 'running-out': new CollectSink<Running>(), 'window-out': new CollectSink<Count>() };
  const accounting = new AwsAccounting();
  const ingest = createIngestHandler({ job, sqs: clients.sqs, queues: staticQueues });
  for (let i = 0; i < clicks.length; i += 10) expect((await ingest(post(clicks.slice(i, i + 10)))).statusCode).toBe(202);
  const source = new SqsTransport({ sqs: clients.sqs, job: job.name, queues: staticQueues });
  await source.sendEndOfInput(0, 'clicks', 2);

  const calls = new Map<string, number>();
  const fired: Crash[] = [];
  const container = (): Container => {
    const c = containerClients(options.crashes ?? [], calls, fired);
    const handler = createOperatorHandler({ job, sqs: c.sqs, dynamodb: c.dynamodb, tableName: table, queues: staticQueues, sinks, accounting, logger });
    return {
      invoke: handler,
      crashed: () => c.box.dead,
      close: () => {
        c.sqs.destroy();
        c.dynamodb.destroy();
      },
    };
  };
  const stats = await runUntilDrained({ sqs: clients.sqs, queues, container, warm: options.warm, loseAnswer: options.loseAnswer, maxInvocations: 2000 });
  return { running: sinks['running-out'].records, windows: sinks['window-out'].records, stats, fired, accounting, logged };
}

/** Both outputs are ordered per user: a user's running counts and windows come from one partition. */
const byUser = { orderKey: (r: unknown) => (r as { user: string }).user };

function expectSameAsReference(out: { running: unknown[]; windows: unknown[] }) {
  assertExactlyOnce(reference.running, out.running, { ...byUser, label: 'running counts' });
  assertExactlyOnce(reference.windows, out.windows, { ...byUser, label: 'window counts' });
}

describe('operator handler', () => {
  it('runs a keyed job across three stage functions with the embedded runtime\'s output, one commit per group per invocation', async () => {
    const out = await runOnAws();
    expectSameAsReference(out);
    expect(out.stats.failures).toBe(0);
    // Per key, running counts arrive in order (1, 2, 3, ...).
    for (const u of USERS) {
      const ns = (out.running as Running[]).filter((r) => r.user === u).map((r) => r.n);
      expect(ns).toEqual(ns.map((_, i) => i + 1));
    }
    const tx = out.accounting.get('dynamodb', 'TransactWriteItems').requests;
    expect(tx).toBeGreaterThan(0);
    expect(tx).toBeLessThanOrEqual(out.stats.invocations * 2); // at most one per group (2 partitions) per invocation
    expect(out.accounting.get('sqs', 'SendMessageBatch').requests).toBeGreaterThan(0);
  });

  it('recovers when warm containers hold stale partitions (another container moved them on)', async () => {
    const out = await runOnAws({ warm: 2 });
    expectSameAsReference(out);
    expect(out.logged.filter((m) => m.startsWith('cached partition was stale')).length).toBeGreaterThan(0);
  });

  it('carries partial counts into a window that pre-aggregates, through SQS and DynamoDB outboxes, also under crashes', async () => {
    expect(compile(clickJob('plan', { combineWindows: true }).graph).edges.filter((e) => e.combine)).toHaveLength(1);
    const clean = await runOnAws({ combineWindows: true });
    expectSameAsReference(clean);
    expect(clean.stats.failures).toBe(0);
    const rng = new Rng(7);
    const crashed = await runOnAws({
      combineWindows: true,
      crashes: [
        { command: 'TransactWriteItemsCommand', when: 'after', nth: 1 + rng.int(20) },
        { command: 'SendMessageBatchCommand', when: 'after', nth: 1 + rng.int(20) },
      ],
    });
    expect(crashed.fired.length).toBeGreaterThan(0);
    expectSameAsReference(crashed);
  }, 120_000);

  it('loses and duplicates nothing under seeded crashes at every boundary between AWS calls', async () => {
    // Each boundary of the handler's sequence: recover (GetItem, Query), commit (TransactWriteItems),
    // deliver (SendMessageBatch), clear the outbox (Query, BatchWriteItem), return (the answer lost).
    const boundaries: Omit<Crash, 'nth'>[] = [
      { command: 'TransactWriteItemsCommand', when: 'after' }, // committed, nothing delivered
      { command: 'SendMessageBatchCommand', when: 'before' }, // committed, delivery not started
      { command: 'SendMessageBatchCommand', when: 'after' }, // (part of) the outbox delivered, not cleared
      { command: 'BatchWriteItemCommand', when: 'before' }, // delivered, outbox not cleared
      { command: 'BatchWriteItemCommand', when: 'after' }, // outbox cleared, answer not returned
      { command: 'TransactWriteItemsCommand', when: 'before' },
      { command: 'QueryCommand', when: 'after' },
      { command: 'GetItemCommand', when: 'after' },
    ];
    const covered = new Set<string>();
    let lost = 0;
    for (let seed = 1; seed <= 6; seed++) {
      const rng = new Rng(seed);
      const crashes: Crash[] = [];
      for (let k = 0; k < 4; k++) {
        const b = boundaries[(seed + k * 2) % boundaries.length];
        crashes.push({ ...b, nth: 1 + rng.int(25) });
      }
      const out = await runOnAws({ crashes, loseAnswer: () => rng.int(40) === 0 });
      expect(out.fired.length).toBeGreaterThan(0);
      expectSameAsReference(out);
      for (const f of out.fired) covered.add(`${f.when} ${f.command}`);
      lost += out.stats.crashes - out.fired.length;
    }
    // How often a command runs depends on how fauxqs batches deliveries, which moves with
    // the machine's load: a boundary the seeded runs missed gets a run that crashes at its
    // first call, so every boundary is crossed whatever the timing.
    for (const b of boundaries) {
      if (covered.has(`${b.when} ${b.command}`)) continue;
      const out = await runOnAws({ crashes: [{ ...b, nth: 1 }] });
      expectSameAsReference(out);
      for (const f of out.fired) covered.add(`${f.when} ${f.command}`);
    }
    for (const b of boundaries) expect(covered, `never crashed ${b.when} ${b.command}`).toContain(`${b.when} ${b.command}`);
    expect(lost).toBeGreaterThan(0); // answers lost just before returning
  }, 240_000);
});
