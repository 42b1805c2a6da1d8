/**
 * The stage functions' plan guard (lib/aws/operator/plan-guard.ts) on DynamoDB Local: no
 * coordinator record (a job without checkpoints, or before its first epoch) and a record
 * of the same plan let a container open partitions; a record of another plan (the job
 * rescaled, then deployed again at its old parallelism) refuses with both fingerprints
 * named, and is read again on the next open, so a deployment or restore that makes them
 * agree lets the container go on.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { DynamoDbPointerStore } from '../../lib/aws/dynamodb/dynamodb-pointers.ts';
import { PlanGuard } from '../../lib/aws/operator/plan-guard.ts';
import { RECORD_NAME } from '../../lib/checkpoint/driver.ts';
import { PlanMismatchError } from '../../lib/checkpoint/errors.ts';
import { localClients, unique } from './helpers.ts';

const clients = localClients();
const table = unique('plan-guard');
const pointers = new DynamoDbPointerStore({ client: clients.dynamodb, tableName: table, job: 'orders' });

beforeAll(() => createStateTable(clients.dynamodb, table));
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

describe('PlanGuard', () => {
  it('opens without a record, refuses a record of another plan until it agrees', async () => {
    await new PlanGuard(pointers, 'plan-a').check();
    expect(await pointers.compareAndSet(RECORD_NAME, 0, { job: 'orders', fingerprint: 'plan-b' })).toBe(true);
    const stale = new PlanGuard(pointers, 'plan-a');
    const e = await stale.check().catch((err: unknown) => err);
    expect(e).toBeInstanceOf(PlanMismatchError);
    expect((e as PlanMismatchError).expected).toBe('plan-a');
    expect((e as PlanMismatchError).received).toBe('plan-b');
    expect((e as Error).message).toContain('deploy the job at the parallelism sluice rescale set');
    // Read again on the next open: the record moved to this plan (a restore adopted it).
    const rec = await pointers.read<{ job: string; fingerprint: string }>(RECORD_NAME);
    expect(await pointers.compareAndSet(RECORD_NAME, rec!.version, { job: 'orders', fingerprint: 'plan-a' })).toBe(true);
    await stale.check();
    await new PlanGuard(pointers, 'plan-a').check();
  });
});
