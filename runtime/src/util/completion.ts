// The bash and zsh completion script of a command with subcommands, which `ifp completion` and
// `kubectl ifp completion` print.
/**
 * Shell completion for a command with subcommands: the script `COMMAND completion bash|zsh`
 * prints. Completes the subcommand, then the words and flags it takes; a flag's value and
 * anything else fall back to file names. zsh runs the same function through bashcompinit.
 */
export interface CompletionSpec {
  /** The executable's name, as the shell sees it (ifp, kubectl-ifp). */
  program: string;
  /** Each subcommand and the words it completes after it: its own subcommands, kinds, flags. */
  commands: Record<string, string[]>;
  /** Flags every subcommand takes. */
  globalFlags?: string[];
}

export const SHELLS = ["bash", "zsh"] as const;
export type Shell = (typeof SHELLS)[number];

const WORD = /^[-A-Za-z0-9_.=]+$/;

/** The completion script for `shell`. */
export function completionScript(spec: CompletionSpec, shell: Shell): string {
  const words = [
    spec.program,
    ...Object.keys(spec.commands),
    ...Object.values(spec.commands).flat(),
    ...(spec.globalFlags ?? []),
  ];
  const bad = words.find((w) => !WORD.test(w));
  if (bad !== undefined) throw new Error(`${JSON.stringify(bad)} cannot be completed`);
  const fn = `_${spec.program.replace(/[^A-Za-z0-9_]/g, "_")}_complete`;
  const global = (spec.globalFlags ?? []).join(" ");
  const cases = Object.entries(spec.commands)
    .map(([command, after]) => `    ${command}) words="${[...after, ...(spec.globalFlags ?? [])].join(" ")}" ;;`)
    .join("\n");
  const bash = `${fn}() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" command="" words="" i
  for ((i = 1; i < COMP_CWORD; i++)); do
    case " ${Object.keys(spec.commands).join(" ")} " in
      *" \${COMP_WORDS[i]} "*) command="\${COMP_WORDS[i]}"; break ;;
    esac
  done
  case "$command" in
    "") words="${[...Object.keys(spec.commands), ...(global ? [global] : [])].join(" ")}" ;;
${cases}
  esac
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o default -F ${fn} ${spec.program}
`;
  return shell === "bash"
    ? `# bash completion for ${spec.program}: source <(${spec.program.replace("kubectl-", "kubectl ")} completion bash)\n${bash}`
    : `# zsh completion for ${spec.program}: source <(${spec.program.replace("kubectl-", "kubectl ")} completion zsh)\nautoload -U +X bashcompinit && bashcompinit\n${bash}`;
}
