/**
 * Lambda authorizer (HTTP API, simple responses) for the API-key option of the
 * ingestion endpoint: the `x-api-key` header's SHA-256 must equal one of the digests in
 * SLUICE_API_KEY_SHA256 (infra/handler-environment.ts). Only digests are deployed, so
 * the template and the function's configuration never hold a key.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { APIGatewayRequestAuthorizerEventV2, APIGatewaySimpleAuthorizerResult } from 'aws-lambda';
import { HANDLER_ENV } from '../handler-environment.ts';

export function parseDigests(value: string | undefined): Buffer[] {
  return (value ?? '')
    .split(',')
    .map((d) => d.trim().toLowerCase())
    .filter((d) => /^[0-9a-f]{64}$/.test(d))
    .map((d) => Buffer.from(d, 'hex'));
}

/** Constant time per digest, so response timing does not reveal how much of a key matched. */
export function isAuthorized(key: string | undefined, digests: readonly Buffer[]): boolean {
  if (!key) return false;
  const d = createHash('sha256').update(key, 'utf8').digest();
  let ok = false;
  for (const accepted of digests) if (timingSafeEqual(accepted, d)) ok = true;
  return ok;
}

const digests = parseDigests(process.env[HANDLER_ENV.apiKeyHashes]);

export const handler = async (event: APIGatewayRequestAuthorizerEventV2): Promise<APIGatewaySimpleAuthorizerResult> => ({
  isAuthorized: isAuthorized(event.headers?.['x-api-key'], digests),
});
