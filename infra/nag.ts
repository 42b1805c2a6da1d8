/**
 * cdk-nag AwsSolutions findings that are deliberate, each with its reason. Every
 * suppression names the resource it covers and, for IAM5, the exact wildcard it allows,
 * so a new finding anywhere else still fails the nag test.
 */
import type * as iam from 'aws-cdk-lib/aws-iam';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { NagSuppressions } from 'cdk-nag';
import { Construct } from 'constructs';
import type { SluiceFunction } from './function.ts';

/** Object ARNs under one of the job's bucket prefixes (permissions.ts bucketPrefixes). */
const PREFIX_OBJECTS = /^Resource::<[A-Za-z0-9]+\.Arn>\/[A-Za-z0-9_-]+\/(spill|snapshots|manifests|checkpoints|input-log|savepoints)\/\*$/;

export function suppressFunctionFindings(functions: readonly SluiceFunction[]): void {
  for (const f of functions) {
    NagSuppressions.addResourceSuppressions(f.fn, [
      {
        id: 'AwsSolutions-L1',
        reason: 'nodejs22.x is the runtime the design fixes and the handlers are tested on; moving to a newer runtime is a deliberate upgrade, not a default.',
      },
    ]);
    NagSuppressions.addResourceSuppressions(
      f.role,
      [
        {
          id: 'AwsSolutions-IAM5',
          reason: 'Object keys are generated per envelope, snapshot, epoch, input log segment and savepoint, so object access is granted on the job\'s key prefix (`<bucket>/<job>/<kind>/*`), not on the whole bucket.',
          appliesTo: [{ regex: `/${PREFIX_OBJECTS.source}/g` }],
        },
      ],
      true,
    );
  }
}

/** The ingest function's age bound (and shedding by lag) reads queue ages with cloudwatch:GetMetricData, which IAM supports on Resource "*" only. */
export function suppressQueueAgeFinding(f: SluiceFunction): void {
  NagSuppressions.addResourceSuppressions(
    f.role,
    [{ id: 'AwsSolutions-IAM5', reason: 'The ingestion back-pressure age bound and load shedding by lag read ApproximateAgeOfOldestMessage with cloudwatch:GetMetricData, which supports only Resource "*".', appliesTo: ['Resource::*'] }],
    true,
  );
}

/**
 * A state machine that logs to CloudWatch Logs and traces with X-Ray needs
 * logs:CreateLogDelivery & co. and xray:PutTraceSegments & co., which IAM supports on
 * Resource "*" only. Its tasks' permissions must name their resources (test/infra checks
 * the example factory's role).
 */
export function suppressStateMachineFindings(stateMachine: sfn.IStateMachine): void {
  if (!(stateMachine instanceof sfn.StateMachine)) return;
  NagSuppressions.addResourceSuppressions(
    stateMachine.role,
    [
      {
        id: 'AwsSolutions-IAM5',
        reason: 'CloudWatch Logs vended log delivery (logs:CreateLogDelivery, logs:PutResourcePolicy, ...) and X-Ray (xray:PutTraceSegments, ...) accept only Resource "*" for a state machine execution role.',
        appliesTo: ['Resource::*'],
      },
    ],
    true,
  );
}

/**
 * The wildcards of SluiceJob.grantOperate on the grantee's role (when it is one of this
 * app's constructs): the job's key prefixes, ListEventSourceMappings and GetMetricData (no
 * resource-level permission in IAM), and the coordinator's executions (named per start).
 */
export function suppressOperateFindings(grantee: iam.IGrantable): void {
  const role = grantee.grantPrincipal;
  if (!(role instanceof Construct)) return;
  NagSuppressions.addResourceSuppressions(
    role,
    [
      {
        id: 'AwsSolutions-IAM5',
        reason: 'sluice checkpoints|savepoint|restore read objects whose keys are generated per snapshot, epoch, input log segment and savepoint: access is on the job\'s key prefixes; lambda:ListEventSourceMappings and cloudwatch:GetMetricData support only Resource "*"; StopExecution names the coordinator\'s executions, whose names are generated per start.',
        appliesTo: [{ regex: `/${PREFIX_OBJECTS.source}/g` }, 'Resource::*', { regex: '/^Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:.*:\\*$/g' }],
      },
    ],
    true,
  );
}
