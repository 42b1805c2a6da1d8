/**
 * A Lambda container's environment in an assembly run: the template's variables, the
 * ones Lambda itself sets (which the template cannot override), and this run's endpoint
 * and credentials. The access key id is the function's own, so the proxy knows the caller;
 * no shared AWS configuration of this machine reaches the function.
 */
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AssemblyFunction } from './model.ts';

/** A function's access key id: what the proxy knows it by (letters and digits, as DynamoDB Local wants). */
export function accessKeyOf(fn: Pick<AssemblyFunction, 'logicalId'>): string {
  return `ASIA${createHash('sha256').update(fn.logicalId).digest('hex').slice(0, 16).toUpperCase()}`;
}

/** `endpoint`: the proxy (AWS_ENDPOINT_URL; an IP address, so S3 clients use path-style URLs). */
export function lambdaEnvironment(fn: AssemblyFunction, region: string, endpoint: string): Record<string, string> {
  const none = join(tmpdir(), 'sluice-assembly-no-aws-config');
  return {
    PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin',
    LANG: 'en_US.UTF-8',
    TZ: ':UTC',
    ...fn.environment,
    LAMBDA_TASK_ROOT: fn.assetDir ?? '',
    AWS_EXECUTION_ENV: `AWS_Lambda_${fn.runtime}`,
    AWS_LAMBDA_FUNCTION_NAME: fn.name,
    AWS_LAMBDA_FUNCTION_VERSION: '$LATEST',
    AWS_LAMBDA_FUNCTION_MEMORY_SIZE: String(fn.memoryMb),
    AWS_LAMBDA_LOG_GROUP_NAME: fn.logGroupName,
    AWS_LAMBDA_INITIALIZATION_TYPE: 'on-demand',
    AWS_REGION: region,
    AWS_DEFAULT_REGION: region,
    AWS_ACCESS_KEY_ID: accessKeyOf(fn),
    AWS_SECRET_ACCESS_KEY: 'local',
    AWS_ENDPOINT_URL: endpoint,
    AWS_CONFIG_FILE: none,
    AWS_SHARED_CREDENTIALS_FILE: none,
    AWS_EC2_METADATA_DISABLED: 'true',
  };
}
