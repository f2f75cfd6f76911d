// IAM, enforced in front of the local AWS services, for tests.
//
// moto can authenticate requests, but it authorizes DynamoDB, KMS and Lambda calls
// against the resource "*" and ignores almost every condition key, so a policy scoped to
// one table (as every one of ours is) is either refused or not checked at all. This gate
// sits between the functions under test and the local services instead: it reads each
// request's SigV4 access key, finds the principal registered for it (a function, with
// exactly the policies its role gets from template.yaml: infra/local/stack.py), works
// out the action, the resource ARN and the request's condition keys the way AWS does,
// and asks @cloud-copilot/iam-simulate (an IAM policy simulator: identity and resource
// policies, every condition operator) whether the call is allowed. A refused call gets
// AccessDeniedException, shaped as the service would send it; an allowed one goes on to
// moto (or, for Lambda, to the local Lambda emulator). Every decision is recorded, so a
// test can list the statements no call needed.
//
// Requests signed with a key nobody registered (the tests' own set-up) pass unchecked.
//
// usage: node iam_gate.mjs --upstream URL --port-file FILE
// admin (unsigned, on the same port):
//   POST /__iam/principal   {"access_key_id","name","role","policies":[{"name","document"}]}
//   POST /__iam/resource-policy {"arn","policy"}      (a KMS key policy)
//   POST /__iam/route       {"service","upstream"}    (e.g. lambda -> the Lambda emulator)
//   GET  /__iam/calls       every decision so far
import http from 'node:http'
import fs from 'node:fs'
import { runSimulation } from '@cloud-copilot/iam-simulate'

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), [])
)
const ACCOUNT = '123456789012'
const principals = new Map() // access key id -> {name, role, policies}
const resourcePolicies = new Map() // arn -> policy
const routes = new Map() // service -> upstream URL
const calls = []

// The simulator does not read condition keys whose variable part follows a colon
// (kms:EncryptionContext:<key>); it does read the request-tag form. Both sides of the
// comparison are renamed alike, so the condition means what it did.
const EC = /^kms:encryptioncontext:(.+)$/i
const ecKey = (k) => `aws:RequestTag/kms-encryption-context-${k}`
function renameConditionKeys(document) {
  const copy = structuredClone(document)
  const statements = Array.isArray(copy.Statement) ? copy.Statement : [copy.Statement]
  for (const s of statements) {
    for (const op of Object.keys(s.Condition ?? {})) {
      const keys = s.Condition[op]
      for (const k of Object.keys(keys)) {
        const m = EC.exec(k)
        if (m) {
          keys[ecKey(m[1])] = keys[k]
          delete keys[k]
        }
      }
    }
  }
  return copy
}

function accessKeyOf(req) {
  const m = /Credential=([^/]+)\/[^/]+\/([^/]+)\/([^/]+)\//.exec(req.headers.authorization ?? '')
  return m ? { key: m[1], region: m[2], service: m[3] } : null
}

const tableArn = (region, name, index) =>
  name.startsWith('arn:') ? name : `arn:aws:dynamodb:${region}:${ACCOUNT}:table/${name}${index ? `/index/${index}` : ''}`
const queueArn = (region, url) => {
  const parts = new URL(url).pathname.split('/').filter(Boolean)
  return `arn:aws:sqs:${region}:${parts[parts.length - 2] ?? ACCOUNT}:${parts[parts.length - 1]}`
}
const keyArn = (region, id) =>
  id.startsWith('arn:') ? id : id.startsWith('alias/') ? `arn:aws:kms:${region}:${ACCOUNT}:${id}` : `arn:aws:kms:${region}:${ACCOUNT}:key/${id}`

// What a request asks for: its action, its resources, its condition keys, and whether
// the resource is known only from the service's answer (Decrypt names no key).
function describe(req, body, scope) {
  const target = req.headers['x-amz-target'] ?? ''
  const op = target.split('.').pop()
  const json = () => (body.length ? JSON.parse(body.toString('utf8')) : {})
  const { region, service } = scope
  switch (service) {
    case 'dynamodb': {
      const b = json()
      if (b.TransactItems) {
        // A transaction is authorized item by item, as the action each one performs
        // (AWS: "Using IAM with DynamoDB transactions"): there is no TransactWriteItems
        // permission.
        const underlying = { Put: 'PutItem', Update: 'UpdateItem', Delete: 'DeleteItem', ConditionCheck: 'ConditionCheckItem', Get: 'GetItem' }
        const checks = b.TransactItems.map((item) => {
          const [kind, inner] = Object.entries(item)[0]
          return { action: `dynamodb:${underlying[kind] ?? kind}`, resource: tableArn(region, inner.TableName) }
        })
        return { checks, context: {} }
      }
      const resources = b.TableName
        ? [tableArn(region, b.TableName, b.IndexName)]
        : Object.keys(b.RequestItems ?? {}).map((t) => tableArn(region, t))
      return { action: `dynamodb:${op}`, resources, context: {} }
    }
    case 'sqs': {
      if (target) {
        const b = json()
        return { action: `sqs:${op}`, resources: [queueArn(region, b.QueueUrl)], context: {} }
      }
      const form = new URLSearchParams(body.toString('utf8'))
      return { action: `sqs:${form.get('Action')}`, resources: [queueArn(region, form.get('QueueUrl'))], context: {} }
    }
    case 'kms': {
      const b = json()
      const context = {}
      for (const [k, v] of Object.entries(b.EncryptionContext ?? {})) context[ecKey(k)] = v
      return {
        action: `kms:${op}`,
        resources: b.KeyId ? [keyArn(region, b.KeyId)] : [],
        fromAnswer: b.KeyId ? null : (answer) => answer.KeyId,
        context,
      }
    }
    case 'lambda': {
      const tags = /^\/2017-03-31\/tags\/([^/?]+)/.exec(req.url)
      if (tags) return { action: 'lambda:ListTags', resources: [decodeURIComponent(tags[1])], context: {} }
      const m = /^\/2015-03-31\/functions\/([^/]+)\/invocations/.exec(req.url)
      if (!m) return { action: 'lambda:Unknown', resources: ['*'], context: {} }
      const name = decodeURIComponent(m[1])
      const arn = name.startsWith('arn:') ? name : `arn:aws:lambda:${region}:${ACCOUNT}:function:${name}`
      return { action: 'lambda:InvokeFunction', resources: [arn], context: {} }
    }
    case 'ssm': {
      const b = json()
      const names = b.Names ?? [b.Name]
      return {
        action: `ssm:${op}`,
        resources: names.map((n) => `arn:aws:ssm:${region}:${ACCOUNT}:parameter/${n.replace(/^\//, '')}`),
        context: {},
      }
    }
    case 'secretsmanager': {
      const b = json()
      const id = b.SecretId ?? ''
      return {
        action: `secretsmanager:${op}`,
        resources: id.startsWith('arn:') ? [id] : [],
        fromAnswer: id.startsWith('arn:') ? null : (answer) => answer.ARN,
        context: {},
      }
    }
    case 'codedeploy': {
      // A deployment's calls are authorized on its deployment group, which the request
      // does not name: it is asked of the service first (GetDeployment, unsigned).
      const b = json()
      // No resource type (IAM's Service Authorization Reference): evaluated on "*".
      if (op === 'PutLifecycleEventHookExecutionStatus') return { action: `codedeploy:${op}`, resources: ['*'], context: {} }
      if (op === 'GetApplicationRevision') {
        return { action: `codedeploy:${op}`, resources: [`arn:aws:codedeploy:${region}:${ACCOUNT}:application:${b.applicationName}`], context: {} }
      }
      return {
        action: `codedeploy:${op}`,
        resources: [],
        lookup: async () => {
          const asked = await forward(
            { method: 'POST', url: '/', headers: { 'x-amz-target': 'CodeDeploy_20141006.GetDeployment', 'content-type': 'application/x-amz-json-1.1' } },
            Buffer.from(JSON.stringify({ deploymentId: b.deploymentId ?? '' })),
            'codedeploy'
          )
          const info = asked.status === 200 ? JSON.parse(asked.body.toString('utf8')).deploymentInfo : null
          return info ? [`arn:aws:codedeploy:${region}:${ACCOUNT}:deploymentgroup:${info.applicationName}/${info.deploymentGroupName}`] : ['*']
        },
        context: {},
      }
    }
    case 'sts':
      return { action: 'sts:GetCallerIdentity', resources: ['*'], context: {}, always: true }
    default:
      return { action: `${service}:${op || req.method}`, resources: ['*'], context: {} }
  }
}

async function decide(principal, action, resource, context) {
  const policies = principal.policies.map((p) => ({ name: p.name, policy: renameConditionKeys(p.document) }))
  const resourcePolicy = resourcePolicies.get(resource)
  const principalArn = `arn:aws:iam::${ACCOUNT}:role/${principal.role}`
  const result = await runSimulation(
    {
      identityPolicies: policies,
      serviceControlPolicies: [],
      resourceControlPolicies: [],
      ...(resourcePolicy ? { resourcePolicy: renameConditionKeys(resourcePolicy) } : {}),
      request: {
        action,
        principal: principalArn,
        resource: { accountId: ACCOUNT, resource },
        // AWS sets aws:PrincipalArn on every request (the role's ARN for an assumed
        // role); the simulator reads it only from the context.
        contextVariables: { 'aws:PrincipalArn': principalArn, ...context },
      },
    },
    {}
  )
  if (result.resultType === 'error') {
    return { allowed: false, why: `the simulator refused the request: ${JSON.stringify(result.errors).slice(0, 300)}`, statements: [] }
  }
  const analysis = result.result?.analysis
  const statements = (analysis?.identityAnalysis?.allowStatements ?? []).map((s) => `${s.policyId}#${s.explain?.identifier}`)
  return { allowed: result.overallResult === 'Allowed', why: result.overallResult, statements }
}

function denied(res, service, message) {
  const json = ['dynamodb', 'sqs'].includes(service) ? 'application/x-amz-json-1.0' : 'application/x-amz-json-1.1'
  if (service === 'lambda') {
    res.writeHead(403, { 'content-type': 'application/json', 'x-amzn-errortype': 'AccessDeniedException' })
    res.end(JSON.stringify({ Type: 'User', Message: message }))
    return
  }
  res.writeHead(400, { 'content-type': json, 'x-amzn-errortype': 'AccessDeniedException' })
  res.end(JSON.stringify({ __type: 'com.amazon.coral.service#AccessDeniedException', message }))
}

function forward(req, body, service) {
  const upstream = new URL(routes.get(service) ?? args.upstream)
  return new Promise((resolve, reject) => {
    const headers = { ...req.headers, host: upstream.host }
    const out = http.request(
      { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers },
      (answer) => {
        const chunks = []
        answer.on('data', (c) => chunks.push(c))
        answer.on('end', () => resolve({ status: answer.statusCode, headers: answer.headers, body: Buffer.concat(chunks) }))
        answer.on('error', reject)
      }
    )
    out.on('error', reject)
    out.end(body)
  })
}

function admin(req, res, body) {
  const reply = (v) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify(v))
  }
  const b = body.length ? JSON.parse(body.toString('utf8')) : {}
  if (req.url === '/__iam/principal') {
    principals.set(b.access_key_id, { name: b.name, role: b.role ?? b.name, policies: b.policies })
    return reply({ ok: true })
  }
  if (req.url === '/__iam/resource-policy') {
    resourcePolicies.set(b.arn, b.policy)
    return reply({ ok: true })
  }
  if (req.url === '/__iam/route') {
    routes.set(b.service, b.upstream)
    return reply({ ok: true })
  }
  if (req.url === '/__iam/calls') return reply(calls)
  res.writeHead(404)
  res.end()
}

const server = http.createServer(async (req, res) => {
  const chunks = []
  for await (const c of req) chunks.push(c)
  const body = Buffer.concat(chunks)
  try {
    if (req.url.startsWith('/__iam/')) return admin(req, res, body)
    const scope = accessKeyOf(req)
    const principal = scope && principals.get(scope.key)
    if (!principal) {
      const answer = await forward(req, body, scope?.service)
      res.writeHead(answer.status, answer.headers)
      return res.end(answer.body)
    }
    const ask = describe(req, body, scope)
    if (ask.lookup) ask.resources = await ask.lookup()
    let answer = null
    if (ask.fromAnswer) {
      // The resource is named only in the answer (read-only calls): ask, then decide.
      answer = await forward(req, body, scope.service)
      const named = answer.status === 200 ? ask.fromAnswer(JSON.parse(answer.body.toString('utf8'))) : null
      ask.resources = named ? [named] : ['*']
    }
    const checks = ask.checks ?? ask.resources.map((resource) => ({ action: ask.action, resource }))
    for (const { action, resource } of checks) {
      const d = ask.always ? { allowed: true, why: 'always', statements: [] } : await decide(principal, action, resource, ask.context)
      calls.push({ principal: principal.name, action, resource, allowed: d.allowed, why: d.why, statements: d.statements })
      if (!d.allowed) {
        return denied(
          res,
          scope.service,
          `User: arn:aws:sts::${ACCOUNT}:assumed-role/${principal.role}/${principal.name} is not authorized to perform: ${action} on resource: ${resource} because no identity-based policy allows the ${action} action`
        )
      }
    }
    answer = answer ?? (await forward(req, body, scope.service))
    res.writeHead(answer.status, answer.headers)
    res.end(answer.body)
  } catch (e) {
    res.writeHead(500, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ __type: 'InternalFailure', message: `iam_gate: ${e.stack ?? e}` }))
  }
})

server.listen(0, '127.0.0.1', () => {
  const { port } = server.address()
  fs.writeFileSync(`${args['port-file']}.tmp`, String(port))
  fs.renameSync(`${args['port-file']}.tmp`, args['port-file'])
})
process.on('SIGTERM', () => process.exit(0))
