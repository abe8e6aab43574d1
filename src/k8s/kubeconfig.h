// Where the Kubernetes API server is and how to authenticate to it: kubeconfig
// files (KUBECONFIG lists merged first-wins, contexts, inline or file
// certificates, tokens, token files, exec credential plugins) and in-cluster
// service-account configuration. Errors name the file and the field:
//   kubeconfig /x/config: user 'u' client-key-data: not valid base64
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "net/conn.h"

namespace deepbox::k8s {

// An `exec` credential plugin (client.authentication.k8s.io/v1 or v1beta1).
struct ExecConfig {
  std::string api_version;
  std::string command;  // a bare name (PATH) or a path resolved against the kubeconfig dir
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;
  std::string install_hint;
  bool provide_cluster_info = false;
  std::string interactive_mode = "IfAvailable";  // Never | IfAvailable | Always
  std::string origin;  // "kubeconfig /x/config: user 'u' exec", for errors
};

// Everything needed to talk to one API server.
struct RestConfig {
  std::string server;                      // "https://127.0.0.1:6443"
  std::string namespace_name = "default";  // the context's namespace (or the pod's)
  std::string context;                     // the context used ("" in-cluster)
  std::string source;                      // "kubeconfig /x/config" or "in-cluster config"
  std::string kubeconfig_path;             // the explicit --kubeconfig file, if one was given
  net::TlsClientConfig tls;                // CA, static client cert/key, insecure, server name
  std::string token;                       // static bearer token
  std::string token_file;                  // re-read at least every minute
  std::optional<ExecConfig> exec;
  std::string username;  // basic auth (legacy)
  std::string password;
  // ExecCredential spec.cluster for plugins with provideClusterInfo.
  json::object exec_cluster_info;
};

struct KubeconfigOptions {
  // --kubeconfig: one explicit file; wins over KUBECONFIG.
  std::optional<std::string> kubeconfig;
  // ':'-separated list; nullopt = getenv("KUBECONFIG").
  std::optional<std::string> kubeconfig_env;
  std::string context;             // --context; "" = current-context
  std::string namespace_override;  // --namespace
  std::string home;                // "" = $HOME (for ~/.kube/config)
};

struct InClusterOptions {
  std::string service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
  std::optional<std::string> host;  // nullopt = $KUBERNETES_SERVICE_HOST
  std::optional<std::string> port;  // nullopt = $KUBERNETES_SERVICE_PORT
};

Result<RestConfig> LoadKubeconfig(const KubeconfigOptions& options);
Result<RestConfig> LoadInClusterConfig(const InClusterOptions& options = {});
// True when the service host variable and the token file are present.
bool InClusterAvailable(const InClusterOptions& options = {});
// --kubeconfig or KUBECONFIG when given; else the in-cluster config in a pod;
// else ~/.kube/config.
Result<RestConfig> LoadDefaultConfig(const KubeconfigOptions& options,
                                     const InClusterOptions& in_cluster = {});

struct Credentials {
  std::string token;            // "Authorization: Bearer"
  std::string client_cert_pem;  // from an exec plugin (static certs live in RestConfig::tls)
  std::string client_key_pem;
  std::string username;
  std::string password;
};

// The credentials to use now, refreshed as needed: token files are re-read
// every minute, exec plugin output is cached until its expirationTimestamp
// (or until Invalidate() after a 401). Thread-safe.
class CredentialSource {
 public:
  using Clock = std::function<std::chrono::system_clock::time_point()>;
  explicit CredentialSource(RestConfig config, Clock clock = nullptr);

  Result<Credentials> Get();
  void Invalidate();
  // How many times the exec plugin ran (for tests and diagnostics).
  int exec_runs() const;

 private:
  Result<Credentials> RunExec();

  RestConfig config_;
  Clock clock_;
  mutable std::mutex mu_;
  std::optional<Credentials> exec_cached_;
  std::optional<std::chrono::system_clock::time_point> exec_expiry_;
  std::string file_token_;
  std::optional<std::chrono::system_clock::time_point> file_token_read_;
  int exec_runs_ = 0;
};

}  // namespace deepbox::k8s
