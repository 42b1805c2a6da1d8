/**
 * The SQS event records and the invocation context exactly as Lambda builds them from
 * ReceiveMessage output (shape of the published sample events: lower-camel record keys,
 * system attributes as strings, binary attributes base64, eventSource "aws:sqs").
 */
import { randomUUID } from 'node:crypto';
import type { Message } from '@aws-sdk/client-sqs';
import type { Context, SQSMessageAttributes, SQSRecord, SQSRecordAttributes } from 'aws-lambda';

/** System attributes Lambda passes on, in the order its sample events show them. */
const SYSTEM_ATTRIBUTES = ['ApproximateReceiveCount', 'SentTimestamp', 'SequenceNumber', 'MessageGroupId', 'SenderId', 'MessageDeduplicationId', 'ApproximateFirstReceiveTimestamp', 'AWSTraceHeader', 'DeadLetterQueueSourceArn'] as const;

export function sqsRecord(m: Message, eventSourceARN: string, awsRegion: string): SQSRecord {
  const attributes: Record<string, string> = {};
  for (const name of SYSTEM_ATTRIBUTES) {
    const v = m.Attributes?.[name];
    if (v !== undefined) attributes[name] = v;
  }
  const messageAttributes: SQSMessageAttributes = {};
  for (const [name, a] of Object.entries(m.MessageAttributes ?? {})) {
    messageAttributes[name] = {
      ...(a.StringValue !== undefined ? { stringValue: a.StringValue } : {}),
      ...(a.BinaryValue !== undefined ? { binaryValue: Buffer.from(a.BinaryValue).toString('base64') } : {}),
      stringListValues: a.StringListValues ?? [],
      binaryListValues: (a.BinaryListValues ?? []).map((b) => Buffer.from(b).toString('base64')),
      dataType: a.DataType ?? 'String',
    };
  }
  return {
    messageId: m.MessageId!,
    receiptHandle: m.ReceiptHandle!,
    body: m.Body ?? '',
    attributes: attributes as unknown as SQSRecordAttributes,
    messageAttributes,
    md5OfBody: m.MD5OfBody ?? '',
    ...(m.MD5OfMessageAttributes ? { md5OfMessageAttributes: m.MD5OfMessageAttributes } : {}),
    eventSource: 'aws:sqs',
    eventSourceARN,
    awsRegion,
  };
}

/** A Lambda context for one invocation; the account comes from the queue ARN. */
export function lambdaContext(functionName: string, queueArn: string, deadline: number, memoryLimitInMB: number): Context {
  const [, , , region = 'us-east-1', account = '000000000000'] = queueArn.split(':');
  const requestId = randomUUID();
  const day = new Date().toISOString().slice(0, 10).replace(/-/g, '/');
  const legacy = () => {
    throw new Error('context.done/fail/succeed are not supported: return a Promise from an async handler');
  };
  return {
    callbackWaitsForEmptyEventLoop: true,
    functionName,
    functionVersion: '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:${region}:${account}:function:${functionName}`,
    memoryLimitInMB: String(memoryLimitInMB),
    awsRequestId: requestId,
    logGroupName: `/aws/lambda/${functionName}`,
    logStreamName: `${day}/[$LATEST]${requestId.replace(/-/g, '')}`,
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
    done: legacy,
    fail: legacy,
    succeed: legacy,
  };
}
