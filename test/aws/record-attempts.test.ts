/**
 * The operator handler's attempt counts on DynamoDB Local: failures counted by invocations
 * that overlap (an SQS redelivery while the first invocation of a group still runs) are
 * each counted once, and a location at maxAttempts stays there, so a dead letter never
 * says more attempts than the configured limit.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { RecordAttempts } from '../../lib/aws/operator/record-attempts.ts';
import { localClients, unique } from './helpers.ts';

const clients = localClients();
const table = unique('sluice-attempts');
beforeAll(() => createStateTable(clients.dynamodb, table));
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

const failure = { error: 'operator "check" refuses 7', operator: 'check' };

describe('record attempts', () => {
  it('counts every failure of invocations that overlap, none lost to a concurrent write', async () => {
    const scope = { job: unique('j'), stage: 1, partition: 0 };
    const attempts = new RecordAttempts(clients.dynamodb, table, new AwsAccounting());
    const counts = await Promise.all(Array.from({ length: 5 }, () => attempts.failed(scope, '0:0#1#1', failure, 10)));
    expect([...counts].sort((a, b) => a - b)).toEqual([1, 2, 3, 4, 5]);
    const other = await Promise.all([attempts.failed(scope, '0:0#1#2', failure, 10), attempts.failed(scope, '0:0#2#1', failure, 10)]);
    expect(other).toEqual([1, 1]);
    expect(await attempts.parkable(scope, 5)).toEqual(new Map([['0:0#1#1', { ...failure, attempts: 5 }]]));
  });

  it('keeps a location at the limit: an extra run of a parked record does not count again', async () => {
    const scope = { job: unique('j'), stage: 0, partition: 3 };
    const attempts = new RecordAttempts(clients.dynamodb, table, new AwsAccounting());
    const counts = [];
    for (let i = 0; i < 5; i++) counts.push(await attempts.failed(scope, '1:2#3#4', failure, 3));
    expect(counts).toEqual([1, 2, 3, 3, 3]);
    await attempts.forget(scope, ['1:2#3#4']);
    expect(await attempts.failed(scope, '1:2#3#4', failure, 3)).toBe(1);
  });
});
