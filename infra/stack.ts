/**
 * The deployable stack: one SluiceJob and the outputs a user needs to publish events
 * and find results. The repository's app (infra/app.ts) and `sluice synth|deploy` instantiate it.
 */
import { CfnOutput, Stack, type StackProps } from 'aws-cdk-lib';
import type { Construct } from 'constructs';
import { SluiceJob, type SluiceJobProps } from './sluice-job.ts';

export interface SluiceJobStackProps extends StackProps {
  readonly sluice: SluiceJobProps;
}

export { stackNameFor } from '../lib/aws/naming.ts';

export class SluiceJobStack extends Stack {
  readonly sluice: SluiceJob;

  constructor(scope: Construct, id: string, props: SluiceJobStackProps) {
    super(scope, id, props);
    this.sluice = new SluiceJob(this, 'Job', props.sluice);
    const s = this.sluice;
    new CfnOutput(this, 'EndpointUrl', { value: s.endpointUrl, description: 'POST events to <EndpointUrl>streams/<stream>/events (SigV4 by default)' });
    new CfnOutput(this, 'StateTableName', { value: s.table.tableName });
    new CfnOutput(this, 'SnapshotBucketName', { value: s.bucket.bucketName });
    new CfnOutput(this, 'AccessLogBucketName', { value: s.accessLogBucket.bucketName });
    new CfnOutput(this, 'ResultLogGroups', { value: s.resultLogGroups.map((g) => g.logGroupName).join(',') || '-', description: 'Log groups of the sink stages (stdout sinks)' });
    new CfnOutput(this, 'IngestFunctionName', { value: s.ingestion.function.fn.functionName });
    new CfnOutput(this, 'DeadLetterQueueUrls', { value: s.stages.map((x) => x.deadLetterQueue.queueUrl).join(',') });
    new CfnOutput(this, 'DashboardName', { value: s.dashboard.dashboardName });
  }
}

