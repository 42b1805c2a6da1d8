/**
 * vitest global setup: the local AWS servers, started once per test run and shared by
 * every test file (each test uses its own tables, queues and buckets). Tests read the
 * endpoints with inject() and pass them to SDK clients as `endpoint`.
 */
import type { TestProject } from 'vitest/node';
import { LOCAL_CREDENTIALS, LOCAL_REGION, type LocalServer, startDynamoDbLocal } from './dynamodb-local.ts';
import { startFauxqs } from './fauxqs.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    /** DynamoDB Local, e.g. http://127.0.0.1:41234 */
    dynamodbEndpoint: string;
    /** fauxqs: SQS and S3 (path-style) on one endpoint. */
    fauxqsEndpoint: string;
    awsRegion: string;
    awsCredentials: { accessKeyId: string; secretAccessKey: string };
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const started: LocalServer[] = [];
  const stopAll = async () => {
    await Promise.allSettled(started.map((s) => s.stop()));
  };
  try {
    // Both at once: DynamoDB Local's JVM start dominates (a few seconds).
    const [dynamodb, fauxqs] = await Promise.all([
      startDynamoDbLocal().then((s) => (started.push(s), s)),
      startFauxqs().then((s) => (started.push(s), s)),
    ]);
    project.provide('dynamodbEndpoint', dynamodb.endpoint);
    project.provide('fauxqsEndpoint', fauxqs.endpoint);
    project.provide('awsRegion', LOCAL_REGION);
    project.provide('awsCredentials', LOCAL_CREDENTIALS);
  } catch (e) {
    await stopAll();
    throw e;
  }
  return stopAll;
}
