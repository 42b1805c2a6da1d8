/**
 * Faults DynamoDB Local cannot produce (transaction conflicts, throttling, a timeout
 * after the write landed, a crash in the middle of a logged commit), injected by SDK
 * middleware in front of the real server: everything else is DynamoDB Local's real behaviour.
 */
import { DynamoDBClient, ProvisionedThroughputExceededException, TransactionCanceledException } from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient, QueryCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createStateTable, DynamoDbStateBackend } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { CommitRollForwardError, DynamoDbRequestError, DynamoDbThrottledError, DynamoDbTransactionConflictError, DynamoDbUnknownOutcomeError, DynamoDbValidationError } from '../../lib/aws/errors.ts';
import { CommitConflictError } from '../../lib/errors.ts';
import type { PartitionScope, StateWrite } from '../../lib/state/backend.ts';
import { batch, freshScope, read } from '../state/backend-conformance.ts';

const config = { endpoint: inject('dynamodbEndpoint'), region: inject('awsRegion'), credentials: inject('awsCredentials') };
const table = `sluice-faults-${process.pid}-${Date.now()}`;
const clients: DynamoDBClient[] = [];

interface Fault {
  /** SDK command name, e.g. 'TransactWriteItemsCommand'. */
  readonly command: string;
  /** before: the request never reaches DynamoDB; after: it is applied, then the answer is lost. */
  readonly when: 'before' | 'after';
  readonly error: () => Error;
  times: number;
}

/** A client whose requests pass through a fault plan (and an optional gate that holds them). */
function faultyClient() {
  const client = new DynamoDBClient(config);
  clients.push(client);
  const faults: Fault[] = [];
  const gate: { command?: string; wait?: Promise<void> } = {};
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const name = context.commandName ?? '';
      if (gate.wait && gate.command === name) await gate.wait;
      const f = faults.find((x) => x.command === name && x.times > 0);
      if (f) f.times--;
      if (f?.when === 'before') throw f.error();
      const out = await next(args);
      if (f?.when === 'after') throw f.error();
      return out;
    },
    { step: 'initialize', name: 'sluiceFaultInjection' },
  );
  // State written directly (no state log): these tests drive the redo log of large direct batches.
  const backend = () => new DynamoDbStateBackend({ client, tableName: table, stateLog: false });
  return { client, faults, gate, backend };
}

const plain = () => {
  const client = new DynamoDBClient(config);
  clients.push(client);
  return new DynamoDbStateBackend({ client, tableName: table, stateLog: false });
};

function canceled(...codes: string[]): () => Error {
  return () => new TransactionCanceledException({ message: `Transaction cancelled [${codes.join(', ')}]`, $metadata: {}, CancellationReasons: codes.map((Code) => ({ Code })) });
}
function named(name: string, extra: Record<string, unknown> = {}): () => Error {
  return () => Object.assign(new Error(`injected ${name}`), { name, $metadata: {}, ...extra });
}

const writes = (n: number, tag: string): StateWrite[] => Array.from({ length: n }, (_, i) => ({ kg: i % 5, entity: `op\u0001s${i % 5}`, field: `f${i}`, value: { tag, i } }));

async function allFields(scope: PartitionScope): Promise<Record<string, unknown>> {
  const b = plain();
  await b.recover(scope);
  const out: Record<string, unknown> = {};
  for (let k = 0; k < 5; k++) Object.assign(out, await read(b, scope, k, `op\u0001s${k}`));
  return out;
}

beforeAll(async () => {
  const c = new DynamoDBClient(config);
  clients.push(c);
  await createStateTable(c, table);
});
afterAll(() => clients.forEach((c) => c.destroy()));

describe('DynamoDbStateBackend under injected faults', () => {
  it('maps TransactionConflict to a retryable typed error; nothing changed and the retry commits', async () => {
    const f = faultyClient();
    const b = f.backend();
    const scope = freshScope();
    await b.recover(scope);
    f.faults.push({ command: 'TransactWriteItemsCommand', when: 'before', error: canceled('None', 'TransactionConflict'), times: 1 });
    const commit = batch(scope, 0, { writes: writes(3, 'a') });
    const err = await b.commit(commit).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DynamoDbTransactionConflictError);
    expect(err).toMatchObject({ retryable: true, operation: 'TransactWriteItems', table });
    expect((await plain().recover(scope)).version).toBe(0);
    await b.commit(commit);
    expect(Object.keys(await allFields(scope))).toHaveLength(3);
  });

  it.each([
    ['ProvisionedThroughputExceededException', () => new ProvisionedThroughputExceededException({ message: 'slow down', $metadata: {} })],
    ['ThrottlingException', named('ThrottlingException')],
    ['RequestLimitExceeded', named('RequestLimitExceeded')],
    ['a cancellation for throttling', canceled('ThrottlingError', 'None')],
  ])('maps %s to a retryable throttling error', async (_label, error) => {
    const f = faultyClient();
    const b = f.backend();
    const scope = freshScope();
    await b.recover(scope);
    f.faults.push({ command: 'TransactWriteItemsCommand', when: 'before', error, times: 1 });
    const err = await b.commit(batch(scope, 0, { writes: writes(1, 'a') })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DynamoDbThrottledError);
    expect((err as DynamoDbThrottledError).retryable).toBe(true);
    await b.commit(batch(scope, 0, { writes: writes(1, 'a') }));
  });

  it('maps ValidationException to a non-retryable error with the message', async () => {
    const f = faultyClient();
    const b = f.backend();
    const scope = freshScope();
    await b.recover(scope);
    f.faults.push({ command: 'TransactWriteItemsCommand', when: 'before', error: named('ValidationException', { message: 'Item size has exceeded the maximum allowed size' }), times: 1 });
    const err = await b.commit(batch(scope, 0, { writes: writes(1, 'a') })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DynamoDbValidationError);
    expect(err).toMatchObject({ retryable: false, awsMessage: 'Item size has exceeded the maximum allowed size' });
  });

  it('reports a timeout after the write landed as an unknown outcome; re-reading shows it landed and a blind retry is fenced off', async () => {
    const f = faultyClient();
    const b = f.backend();
    const scope = freshScope();
    await b.recover(scope);
    f.faults.push({ command: 'TransactWriteItemsCommand', when: 'after', error: named('TimeoutError'), times: 1 });
    const commit = batch(scope, 0, { writes: writes(4, 'a'), outbox: [{ kind: 'sink', delivery: { sink: 's', producer: '0:0', seq: 1, records: [1] } }] });
    const err = await b.commit(commit).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DynamoDbUnknownOutcomeError);
    expect((err as DynamoDbUnknownOutcomeError).retryable).toBe(true);
    // What the runtime does next: reopen, which re-reads the version.
    const rec = await b.recover(scope);
    expect(rec.version).toBe(1);
    expect(rec.outbox).toHaveLength(1);
    expect(Object.keys(await allFields(scope))).toHaveLength(4);
    // A blind retry cannot apply the batch twice.
    await expect(b.commit(commit)).rejects.toBeInstanceOf(CommitConflictError);
    expect((await plain().recover(scope)).outbox).toHaveLength(1);
  });

  it('reports a broken connection before the write as an unknown outcome too; re-reading shows it did not land', async () => {
    const f = faultyClient();
    const b = f.backend();
    const scope = freshScope();
    await b.recover(scope);
    f.faults.push({ command: 'TransactWriteItemsCommand', when: 'before', error: named('Error', { code: 'ECONNRESET' }), times: 1 });
    const commit = batch(scope, 0, { writes: writes(2, 'a') });
    await expect(b.commit(commit)).rejects.toBeInstanceOf(DynamoDbUnknownOutcomeError);
    expect((await b.recover(scope)).version).toBe(0);
    await b.commit(commit);
    expect((await plain().recover(scope)).version).toBe(1);
  });

  it('a logged (250-write) batch that fails before its flip leaves nothing and can be retried', async () => {
    const f = faultyClient();
    const b = f.backend();
    const scope = freshScope();
    await b.recover(scope);
    f.faults.push({ command: 'PutItemCommand', when: 'before', error: named('Error', { code: 'ECONNREFUSED' }), times: 1 });
    const commit = batch(scope, 0, { writes: writes(250, 'a') });
    const err = await b.commit(commit).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DynamoDbRequestError);
    expect((err as DynamoDbRequestError).retryable).toBe(true);
    expect((await plain().recover(scope)).version).toBe(0);
    expect(await allFields(scope)).toEqual({});
    await b.commit(commit);
    expect(Object.keys(await allFields(scope))).toHaveLength(250);
  });

  it('a logged batch interrupted after its flip is finished by the next recover()', async () => {
    const f = faultyClient();
    const b = f.backend();
    const scope = freshScope();
    await b.recover(scope);
    f.faults.push({ command: 'TransactWriteItemsCommand', when: 'before', error: named('Error', { code: 'ECONNRESET' }), times: 100 });
    const err = await b.commit(batch(scope, 0, { writes: writes(250, 'a'), outbox: [{ kind: 'sink', delivery: { sink: 's', producer: '0:0', seq: 1, records: [1] } }] })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CommitRollForwardError);
    expect(err).toMatchObject({ version: 1, retryable: true });
    // A new owner: recover() applies the logged batch before answering.
    const rec = await plain().recover(scope);
    expect(rec.version).toBe(1);
    expect(rec.outbox).toHaveLength(1);
    const fields = await allFields(scope);
    expect(Object.keys(fields)).toHaveLength(250);
    expect(fields.f249).toEqual({ tag: 'a', i: 249 });
    const doc = DynamoDBDocumentClient.from(clients[0]);
    const ctrl = await doc.send(new QueryCommand({ TableName: table, KeyConditionExpression: 'pk = :pk', ExpressionAttributeValues: { ':pk': `${scope.job}#p#${scope.stage}#${scope.partition}` }, ConsistentRead: true }));
    expect(ctrl.Items!.filter((i) => String(i.sk).startsWith('x#'))).toEqual([]); // redo log removed
    expect(ctrl.Items!.find((i) => i.sk === '#')!.pend).toBeUndefined();
  });

  it('a zombie finishing an old logged batch cannot overwrite what the new owner committed after it', async () => {
    const zombie = faultyClient();
    let release!: () => void;
    zombie.gate.command = 'TransactWriteItemsCommand';
    zombie.gate.wait = new Promise<void>((r) => (release = r));
    const z = zombie.backend();
    const scope = freshScope();
    await z.recover(scope);
    let zombieDone = false;
    const zombieCommit = z.commit(batch(scope, 0, { writes: writes(250, 'old') })).finally(() => (zombieDone = true)); // flips, then blocks applying

    const owner = plain();
    let rec = await owner.recover(scope);
    for (let i = 0; rec.version === 0 && i < 100; i++) {
      await new Promise((r) => setTimeout(r, 50)); // until the zombie's flip has landed
      rec = await owner.recover(scope);
    }
    expect(rec.version).toBe(1);
    await owner.prefetch(scope, [{ kg: 0, entity: 'op\u0001s0' }]);
    expect(owner.peek(scope, 0, 'op\u0001s0')!.get('f0')).toEqual({ tag: 'old', i: 0 });
    await owner.commit(batch(scope, 1, { writes: [{ kg: 0, entity: 'op\u0001s0', field: 'f0', value: 'new' }] }));

    expect(zombieDone).toBe(false);
    release();
    await zombieCommit; // its batch had landed; its late transactions fail their ConditionCheck and stop
    expect(z.accounting.get('dynamodb', 'TransactWriteItems').errors).toBeGreaterThan(0);
    const fields = await allFields(scope);
    expect(fields.f0).toBe('new');
    expect(Object.keys(fields)).toHaveLength(250);
    expect((await plain().recover(scope)).version).toBe(2);
  });
});
