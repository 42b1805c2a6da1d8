/**
 * The pieces of local-AWS mode that need no traffic: which endpoint each service uses
 * (only the SDK's own variables), and the cost estimate from counted requests.
 */
import { ListTablesCommand } from '@aws-sdk/client-dynamodb';
import { ListQueuesCommand } from '@aws-sdk/client-sqs';
import { describe, expect, inject, it } from 'vitest';
import { AwsAccounting } from '../../../lib/aws/cost/accounting.ts';
import { configuredEndpoint } from '../../../lib/aws/configured-endpoints.ts';
import { openLocalAws } from '../../../lib/testing/local-aws/endpoints.ts';
import { estimateCost, formatDollars, PRICES } from '../../../lib/aws/cost/prices.ts';
import { costLine } from '../../../lib/cli/target-local-aws.ts';

describe('endpoints from the SDK variables', () => {
  it('prefers the service variable, falls back to AWS_ENDPOINT_URL, and honours AWS_IGNORE_CONFIGURED_ENDPOINT_URLS', () => {
    const env = { AWS_ENDPOINT_URL: 'http://all:1', AWS_ENDPOINT_URL_SQS: 'http://sqs:2' };
    expect(configuredEndpoint('sqs', env)).toEqual({ variable: 'AWS_ENDPOINT_URL_SQS', url: 'http://sqs:2' });
    expect(configuredEndpoint('dynamodb', env)).toEqual({ variable: 'AWS_ENDPOINT_URL', url: 'http://all:1' });
    expect(configuredEndpoint('s3', {})).toBeUndefined();
    expect(configuredEndpoint('sqs', { ...env, AWS_IGNORE_CONFIGURED_ENDPOINT_URLS: 'true' })).toBeUndefined();
  });

  it('starts nothing when every service is configured, and the clients reach those servers', async () => {
    // The SDK reads process.env itself (this file runs in its own worker process).
    const saved = { ...process.env };
    Object.assign(process.env, {
      AWS_ENDPOINT_URL_DYNAMODB: inject('dynamodbEndpoint'),
      AWS_ENDPOINT_URL: inject('fauxqsEndpoint'),
      AWS_REGION: 'eu-west-1',
      AWS_ACCESS_KEY_ID: 'local',
      AWS_SECRET_ACCESS_KEY: 'local',
    });
    const local = await openLocalAws();
    try {
      expect(local.region).toBe('eu-west-1');
      expect(local.dynamodb).toEqual({ origin: `AWS_ENDPOINT_URL_DYNAMODB=${inject('dynamodbEndpoint')}` });
      expect(local.sqs.endpoint).toBeUndefined();
      expect(local.s3.origin).toBe(`AWS_ENDPOINT_URL=${inject('fauxqsEndpoint')}`);
      // The SDK itself picks the variables up: we passed no endpoint.
      await expect(local.clients.dynamodb.send(new ListTablesCommand({}))).resolves.toBeDefined();
      await expect(local.clients.sqs.send(new ListQueuesCommand({}))).resolves.toBeDefined();
    } finally {
      await local.close();
      for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
      Object.assign(process.env, saved);
    }
  });
});

describe('cost estimate', () => {
  it('prices SQS per 64 KB chunk, DynamoDB by the larger of estimated and reported units, S3 by request class', () => {
    const a = new AwsAccounting();
    a.record('sqs', 'SendMessageBatch', { requests: 2, estimatedWriteUnits: 5 }); // 5 chunks in 2 requests
    a.record('sqs', 'ReceiveMessage', { requests: 3, estimatedReadUnits: 3 });
    a.record('sqs', 'GetQueueUrl', { requests: 1 }); // no units recorded: at least one per request
    a.record('dynamodb', 'TransactWriteItems', { requests: 1, writeUnits: 4, estimatedWriteUnits: 200 });
    a.record('dynamodb', 'Query', { requests: 1, readUnits: 3, estimatedReadUnits: 1 });
    a.record('s3', 'PutObject', { requests: 2 });
    a.record('s3', 'GetObject', { requests: 4 });
    a.record('s3', 'DeleteObjects', { requests: 9 });
    a.record('httpapi', 'Request', { requests: 1 });
    const c = estimateCost(a, { invocations: 10, gbSeconds: 2 });
    const q = (service: string, unit: string) => c.lines.find((l) => l.service === service && l.unit === unit)!.quantity;
    expect(q('sqs', '64 KB requests')).toBe(9);
    expect(q('dynamodb', 'write units')).toBe(200);
    expect(q('dynamodb', 'read units')).toBe(3);
    expect(q('s3', 'PUT/LIST requests')).toBe(2);
    expect(q('s3', 'GET requests')).toBe(4);
    const expected =
      10 * PRICES.lambdaPerRequest + 2 * PRICES.lambdaPerGbSecond + 9 * PRICES.sqsFifoPerRequest + 200 * PRICES.dynamoDbPerWriteUnit + 3 * PRICES.dynamoDbPerReadUnit + 2 * PRICES.s3PerPut + 4 * PRICES.s3PerGet + PRICES.httpApiPerRequest;
    expect(c.dollars).toBeCloseTo(expected, 12);
    expect(costLine(c, { invocations: 10, gbSeconds: 2 }, 1000)).toMatch(/^cost on AWS \(us-east-1 prices as of 2025-06\): 10 Lambda requests \(2\.0 GB-s\), 9 SQS requests, 200 DynamoDB write units, 3 read units, 6 S3 requests, 1 HTTP API requests = \$0\.000\d+, \$0\.\d+ per million events$/);
  });

  it('formats small amounts with enough digits', () => {
    expect(formatDollars(0)).toBe('$0');
    expect(formatDollars(12.345)).toBe('$12.35');
    expect(formatDollars(0.5)).toBe('$0.50');
    expect(formatDollars(0.0000421)).toBe('$0.000042');
  });
});
