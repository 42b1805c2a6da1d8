/**
 * CloudFormation intrinsic functions resolved against local physical ids: Ref,
 * Fn::GetAtt, Fn::Join, Fn::Sub, Fn::Select, Fn::Split, Fn::If (with Fn::Equals / Not /
 * And / Or and Condition), Fn::FindInMap, Fn::Base64, Fn::GetAZs, Fn::ToJsonString,
 * Fn::Length, and the pseudo parameters. What a resource's Ref and attributes are comes
 * from `Physical` (template.ts builds it per resource type); anything else is an
 * AssemblyTemplateError naming the path, raised only when that value is needed.
 */
import { AssemblyTemplateError } from './errors.ts';

/** What Ref and Fn::GetAtt give for one resource. */
export interface Physical {
  readonly ref: string;
  readonly attributes: Readonly<Record<string, string>>;
}

export interface ResolveContext {
  readonly region: string;
  readonly accountId: string;
  readonly partition: string;
  readonly urlSuffix: string;
  readonly stackName: string;
  readonly stackId: string;
  /** By logical id. */
  readonly physical: ReadonlyMap<string, Physical>;
  /** Parameter values (template defaults merged with overrides). */
  readonly parameters: Readonly<Record<string, unknown>>;
  readonly conditions: Readonly<Record<string, unknown>>;
  readonly mappings: Readonly<Record<string, Record<string, Record<string, unknown>>>>;
}

/** Marks a value that AWS::NoValue removed. */
const NO_VALUE: unique symbol = Symbol('AWS::NoValue');

export class IntrinsicResolver {
  private readonly conditionCache = new Map<string, boolean>();

  constructor(private readonly ctx: ResolveContext) {}

  /** Resolve every intrinsic in `value`; `where` names the path in errors. */
  resolve(value: unknown, where: string): unknown {
    const out = this.walk(value, where);
    return out === NO_VALUE ? undefined : out;
  }

  /** Resolve to a string, or fail naming the path. */
  string(value: unknown, where: string): string {
    const v = this.resolve(value, where);
    if (typeof v === 'string') return v;
    if (typeof v === 'number' || typeof v === 'boolean') return String(v);
    throw new AssemblyTemplateError(where, `expected a string, resolved to ${JSON.stringify(v)?.slice(0, 80)}`);
  }

  /** A named condition (Conditions section). */
  condition(name: string, where = `Conditions.${name}`): boolean {
    const hit = this.conditionCache.get(name);
    if (hit !== undefined) return hit;
    if (!(name in this.ctx.conditions)) throw new AssemblyTemplateError(where, `no condition "${name}"`);
    const v = this.truth(this.ctx.conditions[name], `Conditions.${name}`);
    this.conditionCache.set(name, v);
    return v;
  }

  private truth(value: unknown, where: string): boolean {
    const v = this.walk(value, where);
    if (typeof v === 'boolean') return v;
    if (v === 'true' || v === 'false') return v === 'true';
    throw new AssemblyTemplateError(where, `expected a condition, resolved to ${JSON.stringify(v)?.slice(0, 80)}`);
  }

  private walk(value: unknown, where: string): unknown {
    if (Array.isArray(value)) return value.map((v, i) => this.walk(v, `${where}[${i}]`)).filter((v) => v !== NO_VALUE);
    if (value === null || typeof value !== 'object') return value;
    const keys = Object.keys(value);
    if (keys.length === 1 && (keys[0] === 'Ref' || keys[0].startsWith('Fn::') || keys[0] === 'Condition')) {
      return this.intrinsic(keys[0], (value as Record<string, unknown>)[keys[0]], `${where}.${keys[0]}`);
    }
    const out: Record<string, unknown> = {};
    for (const k of keys) {
      const v = this.walk((value as Record<string, unknown>)[k], `${where}.${k}`);
      if (v !== NO_VALUE) out[k] = v;
    }
    return out;
  }

  private intrinsic(fn: string, arg: unknown, where: string): unknown {
    switch (fn) {
      case 'Ref':
        return this.ref(this.plain(arg, where), where);
      case 'Condition':
        return this.condition(this.plain(arg, where), where);
      case 'Fn::GetAtt': {
        const a = this.walk(arg, where);
        const [id, ...attr] = typeof a === 'string' ? a.split('.') : (a as string[]);
        return this.getAtt(String(id), attr.join('.'), where);
      }
      case 'Fn::Join': {
        const [sep, list] = this.pair(arg, where);
        const items = this.walk(list, where);
        if (!Array.isArray(items)) throw new AssemblyTemplateError(where, 'Fn::Join needs a list');
        return items.map((x, i) => this.scalar(x, `${where}[1][${i}]`)).join(String(sep));
      }
      case 'Fn::Sub':
        return this.sub(arg, where);
      case 'Fn::Select': {
        const [index, list] = this.pair(arg, where);
        const items = this.walk(list, where);
        const i = Number(this.walk(index, where));
        if (!Array.isArray(items) || !Number.isInteger(i) || i < 0 || i >= items.length) throw new AssemblyTemplateError(where, `Fn::Select index ${i} outside ${JSON.stringify(items)?.slice(0, 80)}`);
        return items[i];
      }
      case 'Fn::Split': {
        const [sep, s] = this.pair(arg, where);
        return this.scalar(this.walk(s, where), where).split(String(sep));
      }
      case 'Fn::If': {
        const [name, yes, no] = arg as [string, unknown, unknown];
        return this.condition(name, where) ? this.walk(yes, `${where}[1]`) : this.walk(no, `${where}[2]`);
      }
      case 'Fn::Equals': {
        const [a, b] = (arg as unknown[]).map((x, i) => this.walk(x, `${where}[${i}]`));
        return JSON.stringify(a) === JSON.stringify(b);
      }
      case 'Fn::Not':
        return !this.truth((arg as unknown[])[0], where);
      case 'Fn::And':
        return (arg as unknown[]).every((x, i) => this.truth(x, `${where}[${i}]`));
      case 'Fn::Or':
        return (arg as unknown[]).some((x, i) => this.truth(x, `${where}[${i}]`));
      case 'Fn::FindInMap': {
        const [map, top, second] = (arg as unknown[]).map((x, i) => this.scalar(this.walk(x, `${where}[${i}]`), where));
        const v = this.ctx.mappings[map]?.[top]?.[second];
        if (v === undefined) throw new AssemblyTemplateError(where, `no mapping ${map}.${top}.${second}`);
        return v;
      }
      case 'Fn::Base64':
        return Buffer.from(this.scalar(this.walk(arg, where), where)).toString('base64');
      case 'Fn::GetAZs':
        return ['a', 'b', 'c'].map((z) => `${this.ctx.region}${z}`);
      case 'Fn::ToJsonString':
        return JSON.stringify(this.walk(arg, where));
      case 'Fn::Length': {
        const v = this.walk(arg, where);
        return Array.isArray(v) ? v.length : 0;
      }
      default:
        throw new AssemblyTemplateError(where, `intrinsic ${fn} is not supported locally`);
    }
  }

  private plain(arg: unknown, where: string): string {
    if (typeof arg !== 'string') throw new AssemblyTemplateError(where, `expected a name, found ${JSON.stringify(arg)?.slice(0, 80)}`);
    return arg;
  }

  private pair(arg: unknown, where: string): [unknown, unknown] {
    if (!Array.isArray(arg) || arg.length !== 2) throw new AssemblyTemplateError(where, 'expected a list of two');
    return [arg[0], arg[1]];
  }

  private scalar(v: unknown, where: string): string {
    if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean') return String(v);
    throw new AssemblyTemplateError(where, `expected a string, resolved to ${JSON.stringify(v)?.slice(0, 80)}`);
  }

  ref(name: string, where: string): unknown {
    const c = this.ctx;
    switch (name) {
      case 'AWS::Region':
        return c.region;
      case 'AWS::AccountId':
        return c.accountId;
      case 'AWS::Partition':
        return c.partition;
      case 'AWS::URLSuffix':
        return c.urlSuffix;
      case 'AWS::StackName':
        return c.stackName;
      case 'AWS::StackId':
        return c.stackId;
      case 'AWS::NoValue':
        return NO_VALUE;
      case 'AWS::NotificationARNs':
        return [];
    }
    if (name in c.parameters) return c.parameters[name];
    const p = c.physical.get(name);
    if (!p) throw new AssemblyTemplateError(where, `Ref to "${name}", which is neither a resource nor a parameter of the template`);
    return p.ref;
  }

  getAtt(id: string, attribute: string, where: string): string {
    const p = this.ctx.physical.get(id);
    if (!p) throw new AssemblyTemplateError(where, `Fn::GetAtt of "${id}", which is not a resource of the template`);
    const v = p.attributes[attribute];
    if (v === undefined) throw new AssemblyTemplateError(where, `Fn::GetAtt ${id}.${attribute}: the attribute has no local value (known: ${Object.keys(p.attributes).join(', ') || 'none'})`);
    return v;
  }

  private sub(arg: unknown, where: string): string {
    const [text, vars] = typeof arg === 'string' ? [arg, {}] : (arg as [string, Record<string, unknown>]);
    const values: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(vars ?? {})) values[k] = this.walk(v, `${where}.${k}`);
    return String(text).replace(/\$\{([^}]*)\}/g, (whole, inner: string) => {
      if (inner.startsWith('!')) return `\${${inner.slice(1)}}`;
      if (inner in values) return this.scalar(values[inner], where);
      const dot = inner.indexOf('.');
      if (dot > 0 && !inner.startsWith('AWS::')) return this.getAtt(inner.slice(0, dot), inner.slice(dot + 1), where);
      const v = this.ref(inner, where);
      if (v === NO_VALUE) return '';
      return this.scalar(v, `${where} ${whole}`);
    });
  }
}
