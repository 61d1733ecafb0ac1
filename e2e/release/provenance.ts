// The SLSA provenance of a released image: an in-toto statement (https://in-toto.io/Statement/v1)
// whose subject is the image by digest and whose predicate (https://slsa.dev/provenance/v1) names
// what it was built from (the commit, the Dockerfile and every lock file of the commit, each by
// digest), the build's parameters and the builder. sign.ts has cosign sign it (attest-blob
// --statement) into a DSSE envelope, which a registry keeps beside the image.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";

export const STATEMENT_TYPE = "https://in-toto.io/Statement/v1";
export const SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1";
/** What `npm run release` does, as the buildType of its provenance. */
export const BUILD_TYPE = "https://ifp.dev/release/npm-run-release/v1";
/** Where the project's images are published; a statement's subject names the image there. */
export const IMAGE_REPOSITORY = "ghcr.io/ifp-dev";
const SOURCE_REPOSITORY = "https://github.com/ifp-dev/ifp-operator";

/** A file the build read, by digest (SLSA's ResourceDescriptor). */
export interface Resource {
  uri?: string;
  name?: string;
  digest: Record<string, string>;
}

export interface ProvenanceStatement {
  _type: typeof STATEMENT_TYPE;
  subject: Resource[];
  predicateType: typeof SLSA_PROVENANCE_V1;
  predicate: {
    buildDefinition: {
      buildType: string;
      externalParameters: Record<string, string>;
      internalParameters: Record<string, string>;
      resolvedDependencies: Resource[];
    };
    runDetails: {
      builder: { id: string };
      metadata: { invocationId: string; startedOn: string; finishedOn: string };
      byproducts: Resource[];
    };
  };
}

/** Where the build ran: the public CI's workflow run, or this machine's `npm run release`. */
export interface Builder {
  id: string;
  invocationId: string;
  /** The source repository's address. */
  repository: string;
}

/**
 * The builder from the environment: a GitHub Actions run names its workflow (the identity a
 * keyless signature's certificate carries) and its run; elsewhere `IFP_RELEASE_BUILDER_ID` names
 * the builder, by default `npm run release` on this host.
 */
export function builderFromEnv(env: NodeJS.ProcessEnv = process.env, commit = ""): Builder {
  if (env.GITHUB_ACTIONS === "true" && env.GITHUB_WORKFLOW_REF && env.GITHUB_REPOSITORY) {
    const server = env.GITHUB_SERVER_URL ?? "https://github.com";
    return {
      id: `${server}/${env.GITHUB_WORKFLOW_REF}`,
      invocationId: `${server}/${env.GITHUB_REPOSITORY}/actions/runs/${env.GITHUB_RUN_ID}/attempts/${env.GITHUB_RUN_ATTEMPT ?? "1"}`,
      repository: `${server}/${env.GITHUB_REPOSITORY}`,
    };
  }
  return {
    id: env.IFP_RELEASE_BUILDER_ID || `${BUILD_TYPE.replace(/\/v1$/, "")}/local`,
    invocationId: `${BUILD_TYPE.replace(/\/v1$/, "")}/local/${commit}/${Date.now()}`,
    repository: SOURCE_REPOSITORY,
  };
}

const sha256 = (data: Buffer | string) => createHash("sha256").update(data).digest("hex");

/** The lock files of a source tree (git's list of the commit's files), each by its SHA-256. */
export function lockFiles(source: string, files: string[]): Resource[] {
  return files
    .filter((f) => /(^|\/)(package-lock\.json|go\.sum|[^/]+\.lock(\.json)?)$/.test(f) && !f.includes("node_modules/"))
    .sort()
    .map((f) => ({ name: f, digest: { sha256: sha256(readFileSync(join(source, f))) } }));
}

/** The files of a commit, as `git ls-tree` lists them. */
export function commitFiles(repo: string, commit: string): string[] {
  const r = spawnSync("git", ["ls-tree", "-r", "--name-only", "-z", commit], {
    cwd: repo,
    encoding: "utf8",
    maxBuffer: 64 << 20,
  });
  if (r.status !== 0) throw new Error(`git ls-tree ${commit}: ${r.stderr}`);
  return r.stdout.split("\0").filter(Boolean);
}

export function provenanceStatement(opts: {
  image: string;
  digest: string;
  version: string;
  commit: string;
  ref: string;
  dockerfile: string;
  source: string;
  files: string[];
  nodeVersion: string;
  builder: Builder;
  startedOn: Date;
  finishedOn: Date;
  byproducts: { name: string; path: string }[];
}): ProvenanceStatement {
  const hex = /^sha256:([0-9a-f]{64})$/.exec(opts.digest)?.[1];
  if (!hex) throw new Error(`${opts.image}: ${opts.digest} is not a sha256 digest`);
  return {
    _type: STATEMENT_TYPE,
    subject: [{ name: `${IMAGE_REPOSITORY}/${opts.image}`, digest: { sha256: hex } }],
    predicateType: SLSA_PROVENANCE_V1,
    predicate: {
      buildDefinition: {
        buildType: BUILD_TYPE,
        externalParameters: {
          repository: opts.builder.repository,
          ref: opts.ref,
          version: opts.version,
          image: opts.image,
          dockerfile: opts.dockerfile,
        },
        internalParameters: { node: opts.nodeVersion, platform: "linux/amd64" },
        resolvedDependencies: [
          {
            uri: `git+${opts.builder.repository}@${opts.ref === "HEAD" ? opts.commit : opts.ref}`,
            digest: { gitCommit: opts.commit },
          },
          {
            name: opts.dockerfile,
            digest: { sha256: sha256(readFileSync(join(opts.source, opts.dockerfile))) },
          },
          ...lockFiles(opts.source, opts.files),
        ],
      },
      runDetails: {
        builder: { id: opts.builder.id },
        metadata: {
          invocationId: opts.builder.invocationId,
          startedOn: opts.startedOn.toISOString(),
          finishedOn: opts.finishedOn.toISOString(),
        },
        byproducts: opts.byproducts.map((b) => ({ name: b.name, digest: { sha256: sha256(readFileSync(b.path)) } })),
      },
    },
  };
}
