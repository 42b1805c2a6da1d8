/**
 * The local model of one stack: what the runner creates and runs, every value resolved
 * (template.ts gives the physical ids and the resolver). Only resource types the runner
 * uses are modelled; the rest of the template (alarms, dashboards, log groups, APIs
 * beyond their integration) is read for names only.
 */
import { AssemblyTemplateError } from './errors.ts';
import type { IntrinsicResolver } from './intrinsics.ts';

/** A resource of a synthesized template, as template.ts reads it. */
export interface CfnResource {
  readonly Type: string;
  readonly Properties?: Record<string, unknown>;
  readonly Metadata?: Record<string, unknown>;
  readonly Condition?: string;
  readonly DependsOn?: string | string[];
}

export interface PolicyDocument {
  readonly Version?: string;
  readonly Statement: unknown;
}

export interface NamedPolicy {
  readonly name: string;
  readonly document: PolicyDocument;
}

export interface AssemblyRole {
  readonly logicalId: string;
  readonly name: string;
  readonly arn: string;
  /** Inline policies, AWS::IAM::Policy and customer managed policies of the template that name the role. */
  readonly policies: NamedPolicy[];
  /** Managed policy ARNs the template does not define (AWS managed): not evaluated. */
  readonly unresolvedManagedPolicies: string[];
}

export interface AssemblyFunction {
  readonly logicalId: string;
  readonly name: string;
  readonly arn: string;
  /** The bundle directory; undefined for inline code or an image (such a function cannot run here). */
  readonly assetDir?: string;
  /** `index.handler` -> module `index`, export `handler`. */
  readonly handlerModule: string;
  readonly handlerExport: string;
  readonly runtime: string;
  readonly timeoutSeconds: number;
  readonly memoryMb: number;
  readonly environment: Readonly<Record<string, string>>;
  readonly roleArn: string;
  readonly roleLogicalId?: string;
  readonly logGroupName: string;
}

export interface AssemblyQueue {
  readonly logicalId: string;
  readonly name: string;
  /** Where the functions reach it (the proxy's origin). */
  readonly url: string;
  readonly arn: string;
  readonly fifo: boolean;
  /** CreateQueue attributes (strings), RedrivePolicy included. */
  readonly attributes: Readonly<Record<string, string>>;
  readonly deadLetter?: { readonly queueLogicalId: string; readonly maxReceiveCount: number };
  readonly policy?: PolicyDocument;
}

export interface AssemblyEventSource {
  readonly logicalId: string;
  readonly functionLogicalId: string;
  readonly queueLogicalId: string;
  readonly batchSize: number;
  readonly maximumConcurrency?: number;
  readonly reportBatchItemFailures: boolean;
  readonly enabled: boolean;
}

export interface AssemblyTable {
  readonly logicalId: string;
  readonly name: string;
  readonly arn: string;
  readonly keySchema: readonly { readonly AttributeName: string; readonly KeyType: 'HASH' | 'RANGE' }[];
  readonly attributeDefinitions: readonly { readonly AttributeName: string; readonly AttributeType: string }[];
  readonly globalSecondaryIndexes: readonly Record<string, unknown>[];
  readonly localSecondaryIndexes: readonly Record<string, unknown>[];
  readonly ttlAttribute?: string;
}

export interface AssemblyBucket {
  readonly logicalId: string;
  readonly name: string;
  readonly arn: string;
  readonly versioned: boolean;
  readonly policy?: PolicyDocument;
}

export interface AssemblyStateMachine {
  readonly logicalId: string;
  readonly name: string;
  readonly arn: string;
  readonly definition: Record<string, unknown>;
  readonly roleArn: string;
  readonly roleLogicalId?: string;
}

export interface AssemblyIngestion {
  readonly kind: 'httpApi' | 'restApi' | 'functionUrl';
  readonly logicalId: string;
  readonly functionLogicalId: string;
}

export interface AssemblyModel {
  readonly assemblyDir: string;
  readonly stackName: string;
  readonly templateFile: string;
  readonly region: string;
  readonly accountId: string;
  readonly functions: ReadonlyMap<string, AssemblyFunction>;
  readonly roles: ReadonlyMap<string, AssemblyRole>;
  readonly queues: ReadonlyMap<string, AssemblyQueue>;
  readonly eventSources: readonly AssemblyEventSource[];
  readonly tables: ReadonlyMap<string, AssemblyTable>;
  readonly buckets: ReadonlyMap<string, AssemblyBucket>;
  readonly stateMachines: ReadonlyMap<string, AssemblyStateMachine>;
  readonly ingestion: readonly AssemblyIngestion[];
  /** What the model leaves out (an AWS managed policy, an unsupported event source). */
  readonly warnings: readonly string[];
}

export interface BuildInput {
  readonly assemblyDir: string;
  readonly stackName: string;
  readonly templateFile: string;
  readonly region: string;
  readonly accountId: string;
  readonly resources: readonly (readonly [string, CfnResource])[];
  readonly resolver: IntrinsicResolver;
  readonly assetDirOf: (id: string, r: CfnResource) => string | undefined;
}

const QUEUE_ATTRIBUTES = ['DelaySeconds', 'MaximumMessageSize', 'MessageRetentionPeriod', 'ReceiveMessageWaitTimeSeconds', 'VisibilityTimeout', 'FifoQueue', 'ContentBasedDeduplication', 'DeduplicationScope', 'FifoThroughputLimit', 'SqsManagedSseEnabled'] as const;

export function buildModel(input: BuildInput): AssemblyModel {
  const { resolver: rv } = input;
  const warnings: string[] = [];
  const props = (id: string, r: CfnResource) => (rv.resolve(r.Properties ?? {}, `Resources.${id}.Properties`) ?? {}) as Record<string, any>;
  const byType = (type: string) => input.resources.filter(([, r]) => r.Type === type);

  const roles = new Map<string, AssemblyRole>();
  const roleByName = new Map<string, AssemblyRole>();
  const roleByArn = new Map<string, AssemblyRole>();
  for (const [id, r] of byType('AWS::IAM::Role')) {
    const p = props(id, r);
    const role: AssemblyRole = {
      logicalId: id,
      name: rv.string({ Ref: id }, `Resources.${id}`),
      arn: rv.getAtt(id, 'Arn', `Resources.${id}`),
      policies: (p.Policies ?? []).map((x: { PolicyName: string; PolicyDocument: PolicyDocument }) => ({ name: x.PolicyName, document: x.PolicyDocument })),
      unresolvedManagedPolicies: [],
    };
    roles.set(id, role);
    roleByName.set(role.name, role);
    roleByArn.set(role.arn, role);
  }
  const managed = new Map<string, NamedPolicy>();
  for (const [id, r] of [...byType('AWS::IAM::Policy'), ...byType('AWS::IAM::ManagedPolicy')]) {
    const p = props(id, r);
    const policy: NamedPolicy = { name: String(p.PolicyName ?? p.ManagedPolicyName ?? id), document: p.PolicyDocument };
    if (r.Type === 'AWS::IAM::ManagedPolicy') managed.set(rv.string({ Ref: id }, `Resources.${id}`), policy);
    for (const name of (p.Roles ?? []) as string[]) roleByName.get(name)?.policies.push(policy);
  }
  for (const [id, r] of byType('AWS::IAM::Role')) {
    for (const arn of (props(id, r).ManagedPolicyArns ?? []) as string[]) {
      const m = managed.get(arn);
      if (m) roles.get(id)!.policies.push(m);
      else {
        roles.get(id)!.unresolvedManagedPolicies.push(arn);
        warnings.push(`role ${id}: managed policy ${arn} is not in the template, so its statements are not evaluated (calls it alone would allow are denied)`);
      }
    }
  }

  const functions = new Map<string, AssemblyFunction>();
  for (const [id, r] of byType('AWS::Lambda::Function')) {
    const p = props(id, r);
    const handler = String(p.Handler ?? 'index.handler');
    const dot = handler.lastIndexOf('.');
    const roleArn = String(p.Role ?? '');
    const name = rv.string({ Ref: id }, `Resources.${id}`);
    functions.set(id, {
      logicalId: id,
      name,
      arn: rv.getAtt(id, 'Arn', `Resources.${id}`),
      assetDir: p.Code?.ZipFile !== undefined || p.Code?.ImageUri !== undefined ? undefined : input.assetDirOf(id, r),
      handlerModule: dot > 0 ? handler.slice(0, dot) : 'index',
      handlerExport: dot > 0 ? handler.slice(dot + 1) : handler,
      runtime: String(p.Runtime ?? 'nodejs'),
      timeoutSeconds: Number(p.Timeout ?? 3),
      memoryMb: Number(p.MemorySize ?? 128),
      environment: Object.fromEntries(Object.entries((p.Environment?.Variables ?? {}) as Record<string, unknown>).map(([k, v]) => [k, String(v)])),
      roleArn,
      roleLogicalId: roleByArn.get(roleArn)?.logicalId,
      logGroupName: typeof p.LoggingConfig?.LogGroup === 'string' ? p.LoggingConfig.LogGroup : `/aws/lambda/${name}`,
    });
  }
  const functionByRef = (v: string) => [...functions.values()].find((f) => f.name === v || f.arn === v || v.startsWith(`${f.arn}:`));

  const queues = new Map<string, AssemblyQueue>();
  const queuePolicies = new Map<string, PolicyDocument>();
  for (const [id, r] of byType('AWS::SQS::QueuePolicy')) {
    const p = props(id, r);
    for (const url of (p.Queues ?? []) as string[]) queuePolicies.set(url, p.PolicyDocument);
  }
  const queueArns = new Map<string, string>();
  for (const [id] of byType('AWS::SQS::Queue')) queueArns.set(rv.getAtt(id, 'Arn', `Resources.${id}`), id);
  for (const [id, r] of byType('AWS::SQS::Queue')) {
    const p = props(id, r);
    const url = rv.string({ Ref: id }, `Resources.${id}`);
    const attributes: Record<string, string> = {};
    for (const k of QUEUE_ATTRIBUTES) if (p[k] !== undefined) attributes[k] = String(p[k]);
    let deadLetter: AssemblyQueue['deadLetter'];
    if (p.RedrivePolicy) {
      const redrive = typeof p.RedrivePolicy === 'string' ? JSON.parse(p.RedrivePolicy) : p.RedrivePolicy;
      const dlq = queueArns.get(String(redrive.deadLetterTargetArn));
      if (!dlq) throw new AssemblyTemplateError(`Resources.${id}.Properties.RedrivePolicy`, `dead-letter queue ${redrive.deadLetterTargetArn} is not a queue of the template`);
      deadLetter = { queueLogicalId: dlq, maxReceiveCount: Number(redrive.maxReceiveCount) };
      attributes.RedrivePolicy = JSON.stringify({ deadLetterTargetArn: redrive.deadLetterTargetArn, maxReceiveCount: Number(redrive.maxReceiveCount) });
    }
    queues.set(id, { logicalId: id, name: rv.getAtt(id, 'QueueName', `Resources.${id}`), url, arn: rv.getAtt(id, 'Arn', `Resources.${id}`), fifo: attributes.FifoQueue === 'true', attributes, deadLetter, policy: queuePolicies.get(url) });
  }

  const eventSources: AssemblyEventSource[] = [];
  for (const [id, r] of byType('AWS::Lambda::EventSourceMapping')) {
    const p = props(id, r);
    const fn = functionByRef(String(p.FunctionName));
    const queue = queueArns.get(String(p.EventSourceArn));
    if (!fn || !queue) {
      warnings.push(`event source mapping ${id}: ${!fn ? `function ${p.FunctionName} is not in the template` : `source ${p.EventSourceArn} is not an SQS queue of the template`}; not run`);
      continue;
    }
    eventSources.push({
      logicalId: id,
      functionLogicalId: fn.logicalId,
      queueLogicalId: queue,
      batchSize: Number(p.BatchSize ?? 10),
      maximumConcurrency: p.ScalingConfig?.MaximumConcurrency === undefined ? undefined : Number(p.ScalingConfig.MaximumConcurrency),
      reportBatchItemFailures: ((p.FunctionResponseTypes ?? []) as string[]).includes('ReportBatchItemFailures'),
      enabled: p.Enabled === undefined ? true : p.Enabled === true || p.Enabled === 'true',
    });
  }

  const tables = new Map<string, AssemblyTable>();
  for (const [id, r] of [...byType('AWS::DynamoDB::Table'), ...byType('AWS::DynamoDB::GlobalTable')]) {
    const p = props(id, r);
    tables.set(id, {
      logicalId: id,
      name: rv.string({ Ref: id }, `Resources.${id}`),
      arn: rv.getAtt(id, 'Arn', `Resources.${id}`),
      keySchema: p.KeySchema ?? [],
      attributeDefinitions: p.AttributeDefinitions ?? [],
      globalSecondaryIndexes: p.GlobalSecondaryIndexes ?? [],
      localSecondaryIndexes: p.LocalSecondaryIndexes ?? [],
      ttlAttribute: p.TimeToLiveSpecification?.Enabled === true || p.TimeToLiveSpecification?.Enabled === 'true' ? p.TimeToLiveSpecification.AttributeName : undefined,
    });
  }

  const bucketPolicies = new Map<string, PolicyDocument>();
  for (const [id, r] of byType('AWS::S3::BucketPolicy')) {
    const p = props(id, r);
    bucketPolicies.set(String(p.Bucket), p.PolicyDocument);
  }
  const buckets = new Map<string, AssemblyBucket>();
  for (const [id, r] of byType('AWS::S3::Bucket')) {
    const p = props(id, r);
    const name = rv.string({ Ref: id }, `Resources.${id}`);
    buckets.set(id, { logicalId: id, name, arn: rv.getAtt(id, 'Arn', `Resources.${id}`), versioned: p.VersioningConfiguration?.Status === 'Enabled', policy: bucketPolicies.get(name) });
  }

  const stateMachines = new Map<string, AssemblyStateMachine>();
  for (const [id, r] of byType('AWS::StepFunctions::StateMachine')) {
    const p = props(id, r);
    const where = `Resources.${id}.Properties`;
    let definition: Record<string, unknown>;
    if (typeof p.DefinitionString === 'string') definition = parseDefinition(p.DefinitionString, where);
    else if (p.Definition && typeof p.Definition === 'object') definition = p.Definition;
    else throw new AssemblyTemplateError(where, 'a state machine without DefinitionString or Definition (DefinitionS3Location is not read locally)');
    if (p.DefinitionSubstitutions) {
      const subs = p.DefinitionSubstitutions as Record<string, unknown>;
      definition = parseDefinition(JSON.stringify(definition).replace(/\$\{([^}]+)\}/g, (w, k: string) => (k in subs ? JSON.stringify(String(subs[k])).slice(1, -1) : w)), where);
    }
    const roleArn = String(p.RoleArn ?? '');
    stateMachines.set(id, { logicalId: id, name: rv.getAtt(id, 'Name', `Resources.${id}`), arn: rv.getAtt(id, 'Arn', `Resources.${id}`), definition, roleArn, roleLogicalId: roleByArn.get(roleArn)?.logicalId });
  }

  const ingestion: AssemblyIngestion[] = [];
  const containing = (s: unknown) => (typeof s === 'string' ? [...functions.values()].find((f) => s === f.arn || s === f.name || s.includes(`${f.arn}/`) || s.startsWith(`${f.arn}:`)) : undefined);
  for (const [id, r] of input.resources) {
    let kind: AssemblyIngestion['kind'] | undefined;
    let target: unknown;
    if (r.Type === 'AWS::ApiGatewayV2::Integration') [kind, target] = ['httpApi', props(id, r).IntegrationUri];
    else if (r.Type === 'AWS::Lambda::Url') [kind, target] = ['functionUrl', props(id, r).TargetFunctionArn];
    else if (r.Type === 'AWS::ApiGateway::Method') [kind, target] = ['restApi', props(id, r).Integration?.Uri];
    const fn = kind ? containing(target) : undefined;
    if (kind && fn && !ingestion.some((i) => i.functionLogicalId === fn.logicalId)) ingestion.push({ kind, logicalId: id, functionLogicalId: fn.logicalId });
  }

  return { assemblyDir: input.assemblyDir, stackName: input.stackName, templateFile: input.templateFile, region: input.region, accountId: input.accountId, functions, roles, queues, eventSources, tables, buckets, stateMachines, ingestion, warnings };
}

function parseDefinition(text: string, where: string): Record<string, unknown> {
  try {
    return JSON.parse(text) as Record<string, unknown>;
  } catch (e) {
    throw new AssemblyTemplateError(where, `the state machine definition is not JSON (${(e as Error).message})`);
  }
}
