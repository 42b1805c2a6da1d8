/**
 * Reading a synthesized cloud assembly (`cdk synth -o DIR`) generically: manifest.json
 * names the stacks and their templates; each Lambda function's bundle is the directory
 * its `aws:asset:path` metadata names (or, failing that, the asset manifest's source of
 * its Code.S3Key). Every resource gets a local physical id: the name the template fixes
 * (QueueName, TableName, ...) or a generated one, as CloudFormation generates them;
 * account, region and partition are local constants. From those, intrinsics resolve
 * (intrinsics.ts) into the model the runner needs: functions, roles with their policy
 * documents, queues, event source mappings, tables, buckets, state machines.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { isAbsolute, join, resolve } from 'node:path';
import { AssemblyTemplateError } from './errors.ts';
import { IntrinsicResolver, type Physical } from './intrinsics.ts';
import { type AssemblyModel, buildModel, type CfnResource } from './model.ts';

export const LOCAL_ACCOUNT_ID = '000000000000';

export interface CfnTemplate {
  readonly Resources: Record<string, CfnResource>;
  readonly Parameters?: Record<string, { Default?: unknown; Type?: string }>;
  readonly Conditions?: Record<string, unknown>;
  readonly Mappings?: Record<string, Record<string, Record<string, unknown>>>;
  readonly Outputs?: Record<string, unknown>;
}

export interface ReadAssemblyOptions {
  /** Default: the assembly's only stack. */
  readonly stackName?: string;
  /** Default AWS_REGION, AWS_DEFAULT_REGION, else us-east-1. */
  readonly region?: string;
  /** Default 000000000000. */
  readonly accountId?: string;
  /** Where the functions' SDKs reach SQS: queue URLs (Ref of a queue) are `${queueOrigin}/<account>/<name>`. */
  readonly queueOrigin: string;
  /** Parameter values over the template's defaults. */
  readonly parameters?: Readonly<Record<string, string>>;
  /** Suffix of generated names (default random): CloudFormation's unique part. */
  readonly nameSuffix?: string;
}

export interface StackArtifact {
  readonly stackName: string;
  readonly templateFile: string;
}

/** The stacks of an assembly directory, from its manifest.json. */
export function assemblyStacks(assemblyDir: string): StackArtifact[] {
  const manifestPath = join(assemblyDir, 'manifest.json');
  const manifest = readJson<{ artifacts?: Record<string, { type?: string; displayName?: string; properties?: { templateFile?: string; stackName?: string } }> }>(manifestPath);
  const out: StackArtifact[] = [];
  for (const [id, a] of Object.entries(manifest.artifacts ?? {})) {
    if (a.type !== 'aws:cloudformation:stack' || !a.properties?.templateFile) continue;
    out.push({ stackName: a.properties.stackName ?? id, templateFile: join(assemblyDir, a.properties.templateFile) });
  }
  return out;
}

/** Read one stack of the assembly into the local model. */
export function readAssembly(assemblyDir: string, options: ReadAssemblyOptions): AssemblyModel {
  const dir = resolve(assemblyDir);
  const stacks = assemblyStacks(dir);
  if (stacks.length === 0) throw new AssemblyTemplateError(join(dir, 'manifest.json'), 'no CloudFormation stack in the assembly (was it written by `cdk synth -o DIR`?)');
  let stack: StackArtifact | undefined;
  if (options.stackName) {
    stack = stacks.find((s) => s.stackName === options.stackName);
    if (!stack) throw new AssemblyTemplateError(join(dir, 'manifest.json'), `no stack "${options.stackName}" (stacks: ${stacks.map((s) => s.stackName).join(', ')})`);
  } else {
    if (stacks.length > 1) throw new AssemblyTemplateError(join(dir, 'manifest.json'), `${stacks.length} stacks (${stacks.map((s) => s.stackName).join(', ')}): name one`);
    stack = stacks[0];
  }
  const template = readJson<CfnTemplate>(stack.templateFile);
  if (!template.Resources || typeof template.Resources !== 'object') throw new AssemblyTemplateError(stack.templateFile, 'no Resources section');
  const region = options.region ?? process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION ?? 'us-east-1';
  const accountId = options.accountId ?? LOCAL_ACCOUNT_ID;
  const suffix = options.nameSuffix ?? randomBytes(8).toString('hex').toUpperCase().slice(0, 12);
  const parameters: Record<string, unknown> = {};
  for (const [k, p] of Object.entries(template.Parameters ?? {})) parameters[k] = options.parameters?.[k] ?? p.Default ?? '';
  const env = { region, accountId, partition: 'aws', urlSuffix: 'amazonaws.com', stackName: stack.stackName, stackId: `arn:aws:cloudformation:${region}:${accountId}:stack/${stack.stackName}/00000000-0000-0000-0000-${suffix.toLowerCase().padEnd(12, '0')}` };
  const physical = new Map<string, Physical>();
  const resolver = new IntrinsicResolver({ ...env, physical, parameters, conditions: template.Conditions ?? {}, mappings: template.Mappings ?? {} });
  // Names first (a name may itself be an intrinsic of parameters), then attributes that use them.
  const resources: [string, CfnResource][] = [];
  for (const [id, r] of Object.entries(template.Resources)) {
    if (r.Condition && !resolver.condition(r.Condition, `Resources.${id}.Condition`)) continue;
    resources.push([id, r]);
  }
  for (const [id, r] of resources) physical.set(id, physicalOf(id, r, { ...env, suffix, queueOrigin: options.queueOrigin.replace(/\/$/, ''), resolver }));
  return buildModel({ assemblyDir: dir, stackName: stack.stackName, templateFile: stack.templateFile, region, accountId, resources, resolver, assetDirOf: (id, r) => assetDirOf(dir, id, r, stack.templateFile) });
}

interface NameContext {
  readonly region: string;
  readonly accountId: string;
  readonly stackName: string;
  readonly suffix: string;
  readonly queueOrigin: string;
  readonly resolver: IntrinsicResolver;
}

/** A name as CloudFormation generates it: `<stack>-<logical id>-<unique>`, trimmed to `max`. */
export function generatedName(stackName: string, logicalId: string, suffix: string, max: number): string {
  const tail = `-${suffix}`;
  return `${stackName}-${logicalId}`.slice(0, max - tail.length) + tail;
}

function physicalOf(id: string, r: CfnResource, c: NameContext): Physical {
  const props = r.Properties ?? {};
  const named = (prop: string, max: number, lower = false): string => {
    const v = props[prop] === undefined ? undefined : c.resolver.string(props[prop], `Resources.${id}.Properties.${prop}`);
    const name = v ?? generatedName(c.stackName, id, c.suffix, max);
    return lower ? name.toLowerCase() : name;
  };
  const { region: rg, accountId: ac } = c;
  switch (r.Type) {
    case 'AWS::SQS::Queue': {
      let name = named('QueueName', 80);
      if (props.QueueName === undefined && isTrue(props.FifoQueue)) name = `${name.slice(0, 75)}.fifo`;
      const url = `${c.queueOrigin}/${ac}/${name}`;
      return { ref: url, attributes: { Arn: `arn:aws:sqs:${rg}:${ac}:${name}`, QueueName: name, QueueUrl: url } };
    }
    case 'AWS::DynamoDB::Table':
    case 'AWS::DynamoDB::GlobalTable': {
      const name = named('TableName', 255);
      const arn = `arn:aws:dynamodb:${rg}:${ac}:table/${name}`;
      return { ref: name, attributes: { Arn: arn, StreamArn: `${arn}/stream/1970-01-01T00:00:00.000`, TableId: c.suffix } };
    }
    case 'AWS::S3::Bucket': {
      const name = named('BucketName', 63, true).replace(/[^a-z0-9.-]/g, '-');
      return { ref: name, attributes: { Arn: `arn:aws:s3:::${name}`, DomainName: `${name}.s3.amazonaws.com`, RegionalDomainName: `${name}.s3.${rg}.amazonaws.com`, DualStackDomainName: `${name}.s3.dualstack.${rg}.amazonaws.com`, WebsiteURL: `http://${name}.s3-website-${rg}.amazonaws.com` } };
    }
    case 'AWS::Lambda::Function': {
      const name = named('FunctionName', 64);
      return { ref: name, attributes: { Arn: `arn:aws:lambda:${rg}:${ac}:function:${name}`, 'SnapStartResponse.ApplyOn': 'None' } };
    }
    case 'AWS::Lambda::Url':
      return { ref: `${id}-${c.suffix}`, attributes: { FunctionUrl: `https://${c.suffix.toLowerCase()}.lambda-url.${rg}.on.aws/`, FunctionArn: '' } };
    case 'AWS::IAM::Role': {
      const name = named('RoleName', 64);
      const path = typeof props.Path === 'string' ? props.Path : '/';
      return { ref: name, attributes: { Arn: `arn:aws:iam::${ac}:role${path}${name}`, RoleId: `AROA${c.suffix}` } };
    }
    case 'AWS::IAM::ManagedPolicy': {
      const name = named('ManagedPolicyName', 128);
      const arn = `arn:aws:iam::${ac}:policy/${name}`;
      return { ref: arn, attributes: { PolicyArn: arn } };
    }
    case 'AWS::Logs::LogGroup': {
      const name = named('LogGroupName', 512);
      return { ref: name, attributes: { Arn: `arn:aws:logs:${rg}:${ac}:log-group:${name}:*` } };
    }
    case 'AWS::StepFunctions::StateMachine': {
      const name = named('StateMachineName', 80);
      const arn = `arn:aws:states:${rg}:${ac}:stateMachine:${name}`;
      return { ref: arn, attributes: { Arn: arn, Name: name, StateMachineRevisionId: arn } };
    }
    case 'AWS::SNS::Topic': {
      const name = named('TopicName', 256);
      const arn = `arn:aws:sns:${rg}:${ac}:${name}`;
      return { ref: arn, attributes: { TopicArn: arn, TopicName: name } };
    }
    case 'AWS::KMS::Key': {
      const keyId = `00000000-0000-0000-0000-${c.suffix.toLowerCase().padEnd(12, '0').slice(0, 12)}`;
      return { ref: keyId, attributes: { Arn: `arn:aws:kms:${rg}:${ac}:key/${keyId}`, KeyId: keyId } };
    }
    case 'AWS::ApiGatewayV2::Api': {
      const apiId = c.suffix.toLowerCase().slice(0, 10);
      return { ref: apiId, attributes: { ApiEndpoint: `https://${apiId}.execute-api.${rg}.amazonaws.com`, ApiId: apiId } };
    }
    case 'AWS::CloudWatch::Alarm': {
      const name = named('AlarmName', 255);
      return { ref: name, attributes: { Arn: `arn:aws:cloudwatch:${rg}:${ac}:alarm:${name}` } };
    }
    default:
      return { ref: `${id}-${c.suffix}`, attributes: {} };
  }
}

function isTrue(v: unknown): boolean {
  return v === true || v === 'true';
}

function assetDirOf(assemblyDir: string, id: string, r: CfnResource, templateFile: string): string | undefined {
  const meta = r.Metadata?.['aws:asset:path'];
  const candidates: string[] = [];
  if (typeof meta === 'string') candidates.push(isAbsolute(meta) ? meta : join(assemblyDir, meta));
  const key = (r.Properties?.Code as { S3Key?: unknown } | undefined)?.S3Key;
  if (typeof key === 'string') {
    for (const f of assetManifests(assemblyDir)) {
      for (const entry of Object.values(f.files ?? {})) {
        if (Object.values(entry.destinations ?? {}).some((d) => d.objectKey === key) && entry.source?.path) candidates.push(join(assemblyDir, entry.source.path));
      }
    }
  }
  for (const c of candidates) if (existsSync(c) && statSync(c).isDirectory()) return c;
  if (candidates.length) throw new AssemblyTemplateError(`${templateFile} Resources.${id}`, `the function's bundle directory ${candidates[0]} does not exist`);
  return undefined;
}

interface AssetManifest {
  files?: Record<string, { source?: { path?: string }; destinations?: Record<string, { objectKey?: string }> }>;
}

function assetManifests(assemblyDir: string): AssetManifest[] {
  const manifest = readJson<{ artifacts?: Record<string, { type?: string; properties?: { file?: string } }> }>(join(assemblyDir, 'manifest.json'));
  return Object.values(manifest.artifacts ?? {})
    .filter((a) => a.type === 'cdk:asset-manifest' && a.properties?.file)
    .map((a) => readJson<AssetManifest>(join(assemblyDir, a.properties!.file!)));
}

function readJson<T>(path: string): T {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new AssemblyTemplateError(path, `cannot be read (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  try {
    return JSON.parse(text) as T;
  } catch (e) {
    throw new AssemblyTemplateError(path, `is not JSON (${(e as Error).message})`);
  }
}
