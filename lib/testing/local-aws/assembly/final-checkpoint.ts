/**
 * One more checkpoint after the drain, so a transactional sink (S3 files) has committed
 * everything: touch the activity item as accepted input would (after the last record),
 * start an execution of the job's state machine as the ingest function's wake-up would
 * (a running one that holds the lease takes the touch at its next open), and wait until
 * an epoch that opened after the touch committed (the lease's coveredFrom passes it), as
 * the local-AWS runner's final epoch does.
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { PhysicalPlan } from '../../../graph/compile.ts';
import { DynamoDbAckStore } from '../../../aws/checkpoint/checkpoint-acks.ts';
import { type Lease, LEASE_NAME } from '../../../aws/checkpoint/checkpoint-task.ts';
import { DynamoDbPointerStore } from '../../../aws/dynamodb/dynamodb-pointers.ts';
import { AssemblyRunTimeoutError, AssemblyTemplateError } from './errors.ts';
import type { AssemblyModel } from './model.ts';
import { stateTableOf } from './outputs.ts';
import type { LocalStepFunctions } from './step-functions.ts';

export async function finalCheckpoint(model: AssemblyModel, plan: PhysicalPlan, sfn: LocalStepFunctions | undefined, dynamodb: DynamoDBClient, log: (line: string) => void, timeoutMs = 60_000): Promise<void> {
  const machine = [...model.stateMachines.values()][0];
  if (!sfn || !machine) throw new AssemblyTemplateError(model.templateFile, 'a transactional sink (S3 files) commits with checkpoints, and the template has no checkpoint state machine');
  const job = plan.job.name;
  const tableName = stateTableOf(model, job);
  const at = Date.now();
  await new DynamoDbAckStore({ client: dynamodb, tableName, job }).touch(at);
  const started = sfn.start(machine.arn, `${job}-final-${at}`, '{}');
  if ('failure' in started) log(`assembly: starting the final checkpoint: ${started.message}`);
  const pointers = new DynamoDbPointerStore({ client: dynamodb, tableName, job });
  const deadline = at + timeoutMs;
  for (;;) {
    const lease = (await pointers.read<Lease>(LEASE_NAME))?.value;
    if (lease && lease.coveredFrom > at) return;
    if (Date.now() > deadline) throw new AssemblyRunTimeoutError('the final checkpoint', Date.now() - at, `no epoch opened after ${new Date(at).toISOString()} committed; running executions: ${sfn.running.map((e) => e.name).join(', ') || 'none'}`);
    // An execution that ended (idle before it saw the touch) is started again.
    if (!sfn.running.length) sfn.start(machine.arn, `${job}-final-${Date.now()}`, '{}');
    await new Promise((r) => setTimeout(r, 200));
  }
}
