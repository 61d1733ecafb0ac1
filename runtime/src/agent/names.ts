// The names live in contract/ so that the operator can grant them; re-exported for the agent.
export { agentNames, agentStoreKey, type AgentNames } from "../contract/agent-names.ts";
