// Package deployfiles holds no code: its tests check the deployment files
// at the root of the repository against each other and against the code.
//
//   - Dockerfile: the builder's Go version is go.mod's, the binaries its RUN
//     line builds are static and run, the final image is non-root.
//   - docker-compose.yml: services, pinned images, ports, mounts,
//     environment and health checks agree with deploy/spillway.yaml,
//     deploy/prometheus and deploy/grafana.
//   - deploy/k8s: every manifest parses, the kustomization lists them all,
//     selectors, probes, ports and the KEDA triggers agree with the
//     ConfigMap's configuration.
//   - deploy/nats: the cluster configuration parses with nats-server's own
//     parser, with JetStream, sync_interval: always and three routes.
//
// The probe paths of compose and Kubernetes are requested from a running
// admitter and worker built the way the Dockerfile builds them.
package deployfiles
