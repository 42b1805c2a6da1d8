/**
 * SluiceJob's grants for the AWS sinks: the stage that runs a sink writes to exactly its
 * prefix or table, the checkpoint task commits (and may delete) S3 file sinks' objects,
 * grantReadResults reads them; cdk-nag stays clean (the prefix wildcard is suppressed for
 * exactly that prefix).
 */
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { describe, expect, it } from 'vitest';
import { AwsSinks } from '../../lib/aws/index.ts';
import { Job } from '../../lib/index.ts';
import type { CheckpointStateMachineFactory } from '../../infra/checkpoints.ts';
import { actions, jobStack, logicalId, nagFindings, roleStatements, type Statement } from './support/stacks.ts';

function sinkJob(): Job {
  const job = new Job('shop', { parallelism: 2 });
  const orders = job.ingest<{ id: string; total: number }>('orders');
  orders.sinkTo(AwsSinks.s3Files({ prefix: 'orders' }), 'archive');
  orders.sinkTo(AwsSinks.s3Files({ bucket: 'analytics-landing', prefix: 'shop/orders/' }), 'landing');
  orders
    .keyBy((o) => o.id)
    .process<{ id: string; total: number }>({ processElement: (o, ctx) => ctx.emit(o) })
    .name('latest')
    .sinkTo(AwsSinks.dynamodbUpsert({ table: 'shop-orders', key: (o: { id: string }) => o.id, partitionKey: 'id' }), 'table');
  return job;
}

const factory: CheckpointStateMachineFactory = (scope, ctx) => {
  const task = ctx.newFunction('Coordinator', `${import.meta.dirname}/../../infra/functions/api-key-authorizer.ts`);
  ctx.grantCoordinator(task.fn);
  return new sfn.StateMachine(scope, 'StateMachine', {
    definitionBody: sfn.DefinitionBody.fromChainable(new sfn.Pass(scope, 'Epoch')),
    logs: { destination: ctx.logGroup, level: sfn.LogLevel.ALL },
    tracingEnabled: true,
  });
};

const text = (s: Statement) => JSON.stringify(s.Resource);

describe('AWS sink grants', () => {
  const { stack, job, resources } = jobStack({ job: sinkJob(), checkpoints: factory }, { nag: true, configure: (s, j) => j.grantReadResults(new iam.Role(s, 'Reader', { assumedBy: new iam.AccountRootPrincipal() })) });
  const statementsOf = (role: unknown) => roleStatements(resources, logicalId(stack, role));

  it('lets each stage write only the sinks it runs', () => {
    const [source, keyed] = job.stages;
    const src = statementsOf(source.operator.role);
    const puts = src.filter((s) => actions(s).includes('s3:PutObject'));
    expect(puts.map(text).join()).toContain('shop/sinks/orders/*');
    expect(puts.map(text).join()).toContain('analytics-landing/shop/orders/*');
    expect(src.some((s) => actions(s).includes('dynamodb:PutItem') && text(s).includes('shop-orders'))).toBe(false);
    const k = statementsOf(keyed.operator.role);
    const put = k.find((s) => actions(s).includes('dynamodb:PutItem') && text(s).includes('table/shop-orders'))!;
    expect(actions(put)).toEqual(['dynamodb:PutItem']);
    expect(k.some((s) => text(s).includes('sinks/orders'))).toBe(false);
  });

  it('lets the checkpoint task commit the S3 file sinks; readers read them and follow the pointer', () => {
    const task = job.functions.find((f) => f.fn.node.id === 'Coordinator')!;
    const del = statementsOf(task.role).filter((s) => actions(s).includes('s3:DeleteObject')).map(text).join();
    expect(del).toContain('shop/sinks/orders/*');
    expect(del).toContain('analytics-landing/shop/orders/*');
    const reader = statementsOf(stack.node.findChild('Reader'));
    expect(reader.some((s) => actions(s).includes('dynamodb:Scan') && text(s).includes('shop-orders'))).toBe(true);
    expect(reader.some((s) => actions(s).includes('s3:GetObject') && text(s).includes('shop/sinks/orders/*'))).toBe(true);
    const pointer = reader.find((s) => actions(s).includes('dynamodb:GetItem') && s.Condition)!;
    expect(pointer.Condition).toEqual({ 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['shop#c'] } });
    expect(reader.some((s) => actions(s).some((a) => /Put|Delete/.test(a)))).toBe(false);
  });

  it('keeps cdk-nag clean', () => {
    expect(nagFindings(stack).errors).toEqual([]);
  });

  it('grants the sinks\' own key when their bucket and table have one', () => {
    const keyed = jobStack((st) => ({ job: sinkJob(), sinkEncryptionKey: new kms.Key(st, 'SinkKey', { enableKeyRotation: true }) }), { nag: true });
    const keyId = logicalId(keyed.stack, keyed.stack.node.findChild('SinkKey'));
    const writer = roleStatements(keyed.resources, logicalId(keyed.stack, keyed.job.stages[1].operator.role));
    const kmsStatement = writer.find((s) => actions(s).includes('kms:GenerateDataKey') && JSON.stringify(s.Resource).includes(keyId))!;
    expect(actions(kmsStatement).sort()).toEqual(['kms:Decrypt', 'kms:Encrypt', 'kms:GenerateDataKey']);
    expect(nagFindings(keyed.stack).errors).toEqual([]);
  });
});
