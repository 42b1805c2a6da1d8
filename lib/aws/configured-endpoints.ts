/**
 * Which endpoint the SDK's own variables configure for a service (AWS_ENDPOINT_URL,
 * AWS_ENDPOINT_URL_DYNAMODB, ..._SQS, ..._S3, and AWS_IGNORE_CONFIGURED_ENDPOINT_URLS),
 * with the SDK's precedence: the service-specific variable wins.
 */
export type EndpointService = 'dynamodb' | 'sqs' | 's3';
const ENV_SUFFIX: Record<EndpointService, string> = { dynamodb: 'DYNAMODB', sqs: 'SQS', s3: 'S3' };

/** The variable that configures a service's endpoint, if any (the service-specific one wins, as in the SDK). */
export function configuredEndpoint(service: EndpointService, env: NodeJS.ProcessEnv = process.env): { variable: string; url: string } | undefined {
  if (/^true$/i.test(env.AWS_IGNORE_CONFIGURED_ENDPOINT_URLS ?? '')) return undefined;
  for (const variable of [`AWS_ENDPOINT_URL_${ENV_SUFFIX[service]}`, 'AWS_ENDPOINT_URL']) {
    const url = env[variable];
    if (url) return { variable, url };
  }
  return undefined;
}
