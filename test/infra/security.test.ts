/**
 * Security of the example app: least-privilege IAM (exact actions, own queues, own
 * partition keys, own bucket prefix, no managed policies), encryption and TLS-only
 * policies on queues and buckets, and cdk-nag's AwsSolutions pack with zero
 * unsuppressed findings, every suppression with a reason. One synth, shared.
 */
import { describe, expect, it } from 'vitest';
import { job as q5 } from '../../examples/nexmark/q5.ts';
import { pointerKey } from '../../lib/aws/dynamodb/dynamodb-pointers.ts';
import { controlPk, statePk } from '../../lib/aws/dynamodb/dynamodb-layout.ts';
import { compile } from '../../lib/graph/compile.ts';
import { coordinatorLeadingKeys, INGEST_KEY_TABLE_ACTIONS, ingestKeyLeadingKeys, STAGE_TABLE_ACTIONS, stageLeadingKeys } from '../../infra/permissions.ts';
import { keyPk } from '../../lib/aws/ingest/idempotency-store.ts';
import { actions, allStatements, exampleApp, logicalId, nagFindings, roleStatements, type Statement } from './support/stacks.ts';

const { stack, job, resources } = exampleApp();
const plan = compile(q5.graph);
const arn = (construct: unknown) => ({ 'Fn::GetAtt': [logicalId(stack, construct), 'Arn'] });
const like = (pattern: string, value: string) => new RegExp(`^${pattern.split('*').map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`).test(value);

describe('IAM', () => {
  it('has no allow statement with a wildcard action anywhere', () => {
    const statements = allStatements(resources);
    expect(statements.length).toBeGreaterThan(10);
    const wild = statements.filter(({ statement }) => statement.Effect === 'Allow' && actions(statement).some((a) => a.includes('*')));
    expect(wild).toEqual([]);
  });

  it('attaches no AWS managed policy to any role', () => {
    const roles = Object.values(resources).filter((r) => r.Type === 'AWS::IAM::Role');
    expect(roles.length).toBe(plan.stages.length + 1);
    for (const r of roles) expect(r.Properties!.ManagedPolicyArns).toBeUndefined();
  });

  it('gives each stage function exactly its queues, its partition keys and the spill prefix', () => {
    for (const s of job.stages) {
      const statements = roleStatements(resources, logicalId(stack, s.operator.role));
      const downstream = [...new Set(s.stage.outputs.map((e) => plan.edges[e].toStage))].map((t) => arn(job.stages[t].queue));
      const expected: Statement[] = [
        { Effect: 'Allow', Action: ['logs:CreateLogStream', 'logs:PutLogEvents'], Resource: arn(s.operator.logGroup) },
        { Effect: 'Allow', Action: ['sqs:ReceiveMessage', 'sqs:ChangeMessageVisibility', 'sqs:GetQueueUrl', 'sqs:DeleteMessage', 'sqs:GetQueueAttributes'], Resource: arn(s.queue) },
        { Effect: 'Allow', Action: ['sqs:SendMessage', 'sqs:GetQueueUrl'], Resource: [...downstream, arn(s.deadLetterQueue)] },
        {
          Effect: 'Allow',
          Action: [...STAGE_TABLE_ACTIONS],
          Resource: arn(job.table),
          Condition: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': stageLeadingKeys(q5.name, s.stage.id) } },
        },
        { Effect: 'Allow', Action: ['s3:GetObject', 's3:PutObject'], Resource: { 'Fn::Join': ['', [arn(job.bucket), `/${q5.name}/spill/*`]] } },
        { Effect: 'Allow', Action: 's3:ListBucket', Resource: arn(job.bucket) },
      ];
      // Resource lists of a single element are collapsed by CDK.
      const norm = (x: Statement) => {
        const { Effect, Action, Resource, Condition } = x;
        return JSON.stringify({ Effect, Action, Resource: Array.isArray(Resource) && Resource.length === 1 ? Resource[0] : Resource, Condition });
      };
      expect(statements.map(norm).sort()).toEqual(expected.map(norm).sort());
    }
  });

  it('gives the ingest function only sends to the source stage queue (and its backlog), the backlog of the stages it feeds, its Idempotency-Key items, no bucket', () => {
    const statements = roleStatements(resources, logicalId(stack, job.ingestion.function.role));
    expect(statements).toEqual([
      { Effect: 'Allow', Action: ['logs:CreateLogStream', 'logs:PutLogEvents'], Resource: arn(job.ingestion.function.logGroup) },
      { Effect: 'Allow', Action: ['sqs:SendMessage', 'sqs:GetQueueUrl', 'sqs:GetQueueAttributes'], Resource: arn(job.stages[0].queue) },
      { Effect: 'Allow', Action: ['sqs:GetQueueUrl', 'sqs:GetQueueAttributes'], Resource: [arn(job.stages[1].queue), arn(job.stages[2].queue)] },
      { Effect: 'Allow', Action: [...INGEST_KEY_TABLE_ACTIONS], Resource: arn(job.table), Condition: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [`${q5.name}#k#*`] } } },
    ]);
    expect(like(ingestKeyLeadingKeys(q5.name)[0], keyPk(q5.name, 'any key'))).toBe(true);
  });

  it('matches the LeadingKeys patterns to the keys the handlers write (lib/aws layouts)', () => {
    for (const stage of plan.stages) {
      const patterns = stageLeadingKeys(q5.name, stage.id);
      const ok = (key: string) => patterns.some((p) => like(p, key));
      for (let kg = 0; kg < q5.graph.maxParallelism; kg += 17) expect(ok(statePk({ job: q5.name, stage: stage.id, partition: 0 }, kg))).toBe(true);
      for (let partition = 0; partition < stage.parallelism; partition++) {
        expect(ok(controlPk({ job: q5.name, stage: stage.id, partition }))).toBe(true);
        // record-attempts.ts: `${job}#f#${stage}#${partition}` (its key function is private).
        expect(ok(`${q5.name}#f#${stage.id}#${partition}`)).toBe(true);
      }
      // Another stage's state and control items are out of reach.
      const other = stage.id + 1;
      expect(ok(statePk({ job: q5.name, stage: other, partition: 0 }, 3))).toBe(false);
      expect(ok(controlPk({ job: q5.name, stage: other, partition: 0 }))).toBe(false);
      expect(ok(pointerKey(q5.name, 'pointer').pk)).toBe(false);
      // Stage 1 must not match stage 10's keys: the pattern ends with '#'.
      expect(ok(statePk({ job: q5.name, stage: stage.id * 10 + 10, partition: 0 }, 1))).toBe(false);
    }
    expect(coordinatorLeadingKeys(q5.name)).toEqual([pointerKey(q5.name, 'coordinator').pk]);
  });
});

describe('encryption and TLS', () => {
  it('encrypts every queue and denies non-TLS access to it', () => {
    const queues = Object.entries(resources).filter(([, r]) => r.Type === 'AWS::SQS::Queue');
    for (const [id, q] of queues) {
      expect(q.Properties!.SqsManagedSseEnabled === true || q.Properties!.KmsMasterKeyId !== undefined).toBe(true);
      const policies = Object.values(resources).filter((r) => r.Type === 'AWS::SQS::QueuePolicy' && r.Properties!.Queues.some((x: { Ref: string }) => x.Ref === id));
      const deny = policies.flatMap((p) => p.Properties!.PolicyDocument.Statement as Statement[]).find((s) => s.Effect === 'Deny' && s.Condition?.Bool?.['aws:SecureTransport'] === 'false');
      expect(deny, `TLS-only policy on ${id}`).toBeDefined();
      expect(actions(deny!)).toEqual(['sqs:*']);
    }
  });

  it('encrypts both buckets and denies non-TLS (and TLS < 1.2) access', () => {
    for (const bucket of [job.bucket, job.accessLogBucket]) {
      const id = logicalId(stack, bucket);
      expect(resources[id]!.Properties!.BucketEncryption).toBeDefined();
      const policy = Object.values(resources).find((r) => r.Type === 'AWS::S3::BucketPolicy' && r.Properties!.Bucket.Ref === id)!;
      const statements = policy.Properties!.PolicyDocument.Statement as Statement[];
      expect(statements.some((s) => s.Effect === 'Deny' && s.Condition?.Bool?.['aws:SecureTransport'] === 'false')).toBe(true);
      expect(statements.some((s) => s.Effect === 'Deny' && s.Condition?.NumericLessThan?.['s3:TlsVersion'] === 1.2)).toBe(true);
    }
  });
});

describe('cdk-nag AwsSolutions', () => {
  it('reports no unsuppressed error or warning', () => {
    const { errors, warnings } = nagFindings(stack);
    expect(errors).toEqual([]);
    expect(warnings).toEqual([]);
  });

  it('gives every suppression a reason, and suppresses only L1 and the prefix-scoped IAM5', () => {
    const suppressions = Object.values(resources).flatMap((r) => ((r as { Metadata?: { cdk_nag?: { rules_to_suppress: { id: string; reason: string; applies_to?: unknown[] }[] } } }).Metadata?.cdk_nag?.rules_to_suppress ?? []));
    expect(suppressions.length).toBeGreaterThan(0);
    for (const s of suppressions) {
      expect(s.reason.length).toBeGreaterThan(40);
      expect(['AwsSolutions-L1', 'AwsSolutions-IAM5']).toContain(s.id);
      if (s.id === 'AwsSolutions-IAM5') expect(s.applies_to).toHaveLength(1);
    }
  });
});
