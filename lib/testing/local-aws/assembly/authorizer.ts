/**
 * IAM evaluation of one caller's action on one resource with @cloud-copilot/iam-simulate:
 * the caller role's identity policies (as the template resolves them), the resource's
 * own policy where the template has one (queue and bucket policies), same account.
 * Requests are taken as TLS (`aws:SecureTransport` true: on AWS every SDK call is),
 * so the usual "deny insecure transport" statements do not refuse loopback HTTP.
 * Decisions are cached per (role, action, resource, condition keys).
 */
import { getDenialReasons, runSimulation } from '@cloud-copilot/iam-simulate';
import type { ActionRequest } from './iam-requests.ts';
import type { AssemblyModel, AssemblyRole, PolicyDocument } from './model.ts';

export interface Decision {
  readonly allowed: boolean;
  /** For a denial: "no statement allows it", or which statement denies it. */
  readonly reason: string;
}

const CACHE_LIMIT = 20_000;

export class IamAuthorizer {
  private readonly cache = new Map<string, Promise<Decision>>();
  private readonly resourcePolicies = new Map<string, PolicyDocument>();

  constructor(private readonly model: AssemblyModel) {
    for (const q of model.queues.values()) if (q.policy) this.resourcePolicies.set(q.arn, q.policy);
    for (const b of model.buckets.values()) if (b.policy) this.resourcePolicies.set(b.arn, b.policy);
  }

  /** The policy of the resource an ARN names (a queue, or the bucket of an object). */
  private resourcePolicyOf(resource: string): PolicyDocument | undefined {
    const direct = this.resourcePolicies.get(resource);
    if (direct) return direct;
    if (resource.startsWith('arn:aws:s3:::')) return this.resourcePolicies.get(resource.split('/')[0]);
    return undefined;
  }

  decide(role: AssemblyRole | undefined, request: ActionRequest): Promise<Decision> {
    if (!role) return Promise.resolve({ allowed: false, reason: 'the caller has no role in the template' });
    const key = JSON.stringify([role.logicalId, request.action, request.resource, request.context]);
    let hit = this.cache.get(key);
    if (!hit) {
      if (this.cache.size >= CACHE_LIMIT) this.cache.clear();
      hit = this.evaluate(role, request);
      this.cache.set(key, hit);
    }
    return hit;
  }

  private async evaluate(role: AssemblyRole, request: ActionRequest): Promise<Decision> {
    const resourcePolicy = this.resourcePolicyOf(request.resource);
    const result = await runSimulation(
      {
        request: {
          principal: role.arn,
          action: request.action,
          resource: { resource: request.resource, accountId: this.model.accountId },
          contextVariables: {
            'aws:SecureTransport': 'true',
            'aws:PrincipalArn': role.arn,
            'aws:PrincipalAccount': this.model.accountId,
            'aws:RequestedRegion': this.model.region,
            ...request.context,
          },
        },
        identityPolicies: role.policies.map((p, i) => ({ name: p.name || `policy-${i + 1}`, policy: p.document })),
        serviceControlPolicies: [],
        resourceControlPolicies: [],
        ...(resourcePolicy ? { resourcePolicy } : {}),
      },
      {},
    );
    if (result.resultType === 'error') return { allowed: false, reason: `the policy simulator refused the request: ${result.errors.message}` };
    if (result.overallResult === 'Allowed') return { allowed: true, reason: 'allowed' };
    if (result.overallResult === 'ImplicitlyDenied') return { allowed: false, reason: 'no statement allows it' };
    const analysis = result.resultType === 'single' ? result.result.analysis : result.results[0]?.analysis;
    const explicit = analysis ? getDenialReasons(analysis).find((d) => d.denialType === 'Explicit') : undefined;
    if (explicit && explicit.denialType === 'Explicit') {
      const statement = explicit.statementId ? `statement "${explicit.statementId}"` : `statement ${explicit.statementIndex}`;
      const where = explicit.policyType === 'resource' ? 'the resource policy' : `policy ${explicit.policyIdentifier ?? '?'}`;
      return { allowed: false, reason: `${statement} of ${where} denies it` };
    }
    return { allowed: false, reason: 'a statement denies it' };
  }
}
