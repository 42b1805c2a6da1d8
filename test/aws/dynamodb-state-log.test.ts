/**
 * The DynamoDB backend's state log (dynamodb-state-log.ts): one log item per commit,
 * compacted into field and timer items later. What a partition reads back must never
 * depend on where compaction stood, on a compaction cut short, or on a stale process
 * compacting after the partition moved on.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { createStateTable, DynamoDbStateBackend } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { PartitionLog } from '../../lib/aws/dynamodb/dynamodb-state-log.ts';
import { Rng } from '../../lib/nexmark/index.ts';
import { InMemoryStateBackend } from '../../lib/state/memory.ts';
import type { StateBackend, StateWrite, TimerEntry } from '../../lib/state/backend.ts';
import { batch, freshScope, read } from '../state/backend-conformance.ts';

const config = { endpoint: inject('dynamodbEndpoint'), region: inject('awsRegion'), credentials: inject('awsCredentials') };
const table = `sluice-state-log-${process.pid}-${Date.now()}`;
const clients: DynamoDBClient[] = [];

/** A client that can fail the n-th TransactWriteItems before it reaches DynamoDB. */
function client(failTransaction?: { nth: number }) {
  const c = new DynamoDBClient(config);
  clients.push(c);
  let seen = 0;
  c.middlewareStack.add(
    (next, context) => async (args) => {
      if (failTransaction && context.commandName === 'TransactWriteItemsCommand' && ++seen === failTransaction.nth) throw new Error('injected: connection reset');
      return next(args);
    },
    { step: 'initialize', name: 'stateLogFault' },
  );
  return c;
}

beforeAll(() => createStateTable(client(), table));
afterAll(() => {
  for (const c of clients) c.destroy();
});

const timer = (key: string, time: number): TimerEntry => ({ node: 3, domain: 'event', time, kg: 2, key, ns: '' });
const sortTimers = (ts: readonly TimerEntry[]) => [...ts].sort((a, b) => a.time - b.time || a.key.localeCompare(b.key));

describe('PartitionLog (pure)', () => {
  it('nets changes since the base: fields last-write-wins, timers added and dropped between compactions leave nothing to write', () => {
    const log = new PartitionLog(0, new Set());
    log.apply(1, { w: [[1, 'e', 'a', 1], [1, 'e', 'b', 2]], ta: [timer('k', 10), timer('j', 20)], td: [] }, 10, ['l#1']);
    log.apply(2, { w: [[1, 'e', 'a', undefined], [1, 'e', 'b', 3]], ta: [], td: [timer('k', 10)] }, 10, ['l#2']);
    // The base items had field a of e (prefetch told the log so).
    expect(Object.fromEntries(log.merge(1, 'e', new Map<string, unknown>([['a', 0], ['c', 9]])))).toEqual({ b: 3, c: 9 });
    expect(log.timers([])).toEqual([timer('j', 20)]);
    const c = log.compaction();
    expect(c.writes).toEqual([
      { kg: 1, entity: 'e', field: 'a', value: undefined },
      { kg: 1, entity: 'e', field: 'b', value: 3 },
    ]);
    expect(c.timerAdds).toEqual([timer('j', 20)]);
    expect(c.timerDeletes).toEqual([]); // k never reached the base items
    log.compacted(2);
    expect(log.compactedThrough).toBe(2);
    expect(log.compaction()).toEqual({ writes: [], timerAdds: [], timerDeletes: [] });
    // j is in the base now: deleting it must delete its item.
    log.apply(3, { w: [], ta: [], td: [timer('j', 20)] }, 5, ['l#3']);
    expect(log.compaction().timerDeletes).toEqual([timer('j', 20)]);
  });

  it('skips deletes of fields the base never had, and deletes conservatively for entities it did not read', () => {
    const log = new PartitionLog(0, new Set());
    log.merge(1, 'new', new Map());
    log.apply(1, { w: [[1, 'new', 'x', 1], [1, 'unread', 'y', undefined]], ta: [], td: [] }, 1, []);
    log.apply(2, { w: [[1, 'new', 'x', undefined]], ta: [], td: [] }, 1, []);
    expect(log.compaction().writes).toEqual([{ kg: 1, entity: 'unread', field: 'y', value: undefined }]);
  });
});

async function snapshot(b: StateBackend, scope: ReturnType<typeof freshScope>, entities: readonly string[]) {
  const rec = await b.recover(scope);
  const state: Record<string, unknown> = {};
  for (const e of entities) state[e] = await read(b, scope, Number(e.slice(1)) % 4, e);
  return { version: rec.version, timers: sortTimers(rec.timers), state };
}

describe('DynamoDbStateBackend with the state log', () => {
  it('reads back exactly what the in-memory backend holds, after every commit, whatever compaction did (seeded)', async () => {
    const rng = new Rng(7);
    const scope = freshScope();
    const memory = new InMemoryStateBackend();
    const accounting = new AwsAccounting();
    const dynamo = new DynamoDbStateBackend({ client: client(), tableName: table, compactAfterCommits: 3, accounting });
    await memory.recover(scope);
    await dynamo.recover(scope);
    const entities = Array.from({ length: 12 }, (_, i) => `e${i}`);
    const live = new Map<string, TimerEntry>();
    for (let v = 0; v < 14; v++) {
      const writes: StateWrite[] = [];
      for (let i = rng.int(6); i >= 0; i--) {
        const e = entities[rng.int(entities.length)];
        writes.push({ kg: Number(e.slice(1)) % 4, entity: e, field: `f${rng.int(3)}`, value: rng.int(4) === 0 ? undefined : { v, i } });
      }
      const timerAdds = Array.from({ length: rng.int(3) }, () => timer(`k${rng.int(5)}`, rng.int(4)));
      const timerDeletes = [...live.values()].filter(() => rng.int(3) === 0);
      for (const t of timerDeletes) live.delete(`${t.key}@${t.time}`);
      for (const t of timerAdds) live.set(`${t.key}@${t.time}`, t);
      // Prefetch as the runtime does before a batch.
      await dynamo.prefetch(scope, writes.map((w) => ({ kg: w.kg, entity: w.entity })));
      const b = batch(scope, v, { writes, timerAdds, timerDeletes });
      await memory.commit(b);
      await dynamo.commit(b);
      const fresh = new DynamoDbStateBackend({ client: client(), tableName: table });
      expect(await snapshot(fresh, scope, entities), `after commit ${v + 1}`).toEqual(await snapshot(memory, scope, entities));
    }
    // Compaction ran (every 3 commits), and most commits wrote one log item only.
    expect(accounting.get('dynamodb', 'UpdateItem').requests).toBe(4);
    expect(accounting.get('dynamodb-items', 'log put').items).toBeGreaterThanOrEqual(12);
  });

  it('a compaction cut short leaves the log in charge; a later one finishes it', async () => {
    const scope = freshScope();
    // The 2nd transaction is the compaction's first group (the 1st is the commit itself).
    const b = new DynamoDbStateBackend({ client: client({ nth: 2 }), tableName: table, compactAfterCommits: 1 });
    await b.recover(scope);
    const writes = Array.from({ length: 150 }, (_, i): StateWrite => ({ kg: 1, entity: `e${i}`, field: 'f', value: i }));
    await b.commit(batch(scope, 0, { writes, timerAdds: [timer('k', 5)] })); // durable, though its compaction failed
    const fresh = () => new DynamoDbStateBackend({ client: client(), tableName: table, stateLog: false });
    const f1 = fresh();
    expect((await f1.recover(scope)).timers).toEqual([timer('k', 5)]);
    expect(await read(f1, scope, 1, 'e149')).toEqual({ f: 149 });
    await b.commit(batch(scope, 1, { writes: [{ kg: 1, entity: 'e0', field: 'f', value: 'new' }] })); // compacts both
    const f2 = new DynamoDbStateBackend({ client: client(), tableName: table, stateLog: false });
    await f2.recover(scope);
    expect(await read(f2, scope, 1, 'e0')).toEqual({ f: 'new' });
    expect(await read(f2, scope, 1, 'e149')).toEqual({ f: 149 });
    // stateLog: false reads the same, and its direct writes land on compacted state.
    await f2.commit(batch(scope, 2, { writes: [{ kg: 1, entity: 'e1', field: 'f', value: 'direct' }] }));
    const f3 = new DynamoDbStateBackend({ client: client(), tableName: table });
    const rec = await f3.recover(scope);
    expect(rec.version).toBe(3);
    expect(rec.timers).toEqual([timer('k', 5)]);
    expect(await read(f3, scope, 1, 'e1')).toEqual({ f: 'direct' });
  });

  it('a stale process cannot compact after the partition moved on: its old values never reach the items', async () => {
    const scope = freshScope();
    const stale = new DynamoDbStateBackend({ client: client(), tableName: table, compactAfterCommits: 1000 });
    await stale.recover(scope);
    await stale.commit(batch(scope, 0, { writes: [{ kg: 1, entity: 'e', field: 'f', value: 'old' }] }));
    const owner = new DynamoDbStateBackend({ client: client(), tableName: table, compactAfterCommits: 1000 });
    await owner.recover(scope);
    await owner.commit(batch(scope, 1, { writes: [{ kg: 1, entity: 'e', field: 'f', value: 'new' }] }));
    expect(await stale.compact(scope)).toBe(false);
    expect(await owner.compact(scope)).toBe(true);
    expect(await stale.compact(scope)).toBe(false);
    const f = new DynamoDbStateBackend({ client: client(), tableName: table, stateLog: false });
    await f.recover(scope);
    expect(await read(f, scope, 1, 'e')).toEqual({ f: 'new' });
  });

  it('compacting after a cold start deletes only items that exist', async () => {
    const scope = freshScope();
    const a = new DynamoDbStateBackend({ client: client(), tableName: table, compactAfterCommits: 1000 });
    await a.recover(scope);
    await a.commit(batch(scope, 0, { writes: [{ kg: 1, entity: 'kept', field: 'f', value: 1 }] }));
    expect(await a.compact(scope)).toBe(true);
    // Created and dropped within one log period (a window's key), and a kept one dropped.
    await a.commit(batch(scope, 1, { writes: [{ kg: 1, entity: 'brief', field: 'f', value: 1 }] }));
    await a.commit(batch(scope, 2, { writes: [{ kg: 1, entity: 'brief', field: 'f', value: undefined }, { kg: 1, entity: 'kept', field: 'f', value: undefined }] }));
    const accounting = new AwsAccounting();
    const cold = new DynamoDbStateBackend({ client: client(), tableName: table, accounting });
    await cold.recover(scope);
    expect(await cold.compact(scope)).toBe(true);
    expect(accounting.get('dynamodb-items', 'compaction state delete').items).toBe(1);
    const f = new DynamoDbStateBackend({ client: client(), tableName: table, stateLog: false });
    await f.recover(scope);
    expect(await read(f, scope, 1, 'kept')).toBeUndefined();
    expect(await read(f, scope, 1, 'brief')).toBeUndefined();
  });

  it('lists a key group once: keys without items need no Query, keys with items (or compacted by this process) do', async () => {
    const scope = freshScope();
    const a = new DynamoDbStateBackend({ client: client(), tableName: table });
    await a.recover(scope);
    await a.commit(batch(scope, 0, { writes: [{ kg: 3, entity: 'old', field: 'f', value: 1 }] }));
    expect(await a.compact(scope)).toBe(true);
    const accounting = new AwsAccounting();
    // No cache to speak of: every read below goes through the listing.
    const b = new DynamoDbStateBackend({ client: client(), tableName: table, accounting, maxCachedEntities: 0 });
    await b.recover(scope);
    accounting.reset();
    await b.prefetch(scope, [{ kg: 3, entity: 'new1' }, { kg: 3, entity: 'new2' }, { kg: 3, entity: 'old' }]);
    expect(accounting.get('dynamodb', 'Query').requests).toBe(2); // the listing, and 'old'
    expect(await read(b, scope, 3, 'old')).toEqual({ f: 1 });
    expect(await read(b, scope, 3, 'new1')).toBeUndefined();
    // b writes new1 and compacts it into an item: a later cold read (evicted cache) must find it.
    await b.commit(batch(scope, 1, { writes: [{ kg: 3, entity: 'new1', field: 'f', value: 2 }] }));
    expect(await b.compact(scope)).toBe(true);
    await b.prefetch(scope, [{ kg: 3, entity: 'x' }]); // evicts new1 from the cache
    expect(await read(b, scope, 3, 'new1')).toEqual({ f: 2 });
  });

  it('writes one small log item per commit instead of one item per field and timer', async () => {
    const accounting = new AwsAccounting();
    // No cache to speak of: every read below goes through the listing.
    const b = new DynamoDbStateBackend({ client: client(), tableName: table, accounting, maxCachedEntities: 0 });
    const scope = freshScope();
    await b.recover(scope);
    accounting.reset();
    await b.commit(batch(scope, 0, { writes: Array.from({ length: 40 }, (_, i) => ({ kg: i % 8, entity: `e${i}`, field: 'f', value: i })), timerAdds: Array.from({ length: 40 }, (_, i) => timer(`k${i}`, i)) }));
    expect(accounting.get('dynamodb', 'TransactWriteItems')).toMatchObject({ requests: 1, items: 2 });
    expect(accounting.get('dynamodb', 'TransactWriteItems').estimatedWriteUnits).toBeLessThanOrEqual(2 * 2 + 2 * 4);
  });
});
