# Builtins-only tests of nix/lib.nix. Evaluates to `true`, or throws a
# message naming the first failing case with what it got and expected:
#
#   nix-instantiate --eval --strict nix/tests.nix
#
# Run by scripts/nix-check.sh (CI without nixpkgs) and by the flake's
# checks.<system>.lib-tests.
let
  lib = import ./lib.nix;

  # A case: { name; got; want; }. Compared with ==, shown as JSON.
  check =
    case:
    if case.got == case.want then
      true
    else
      throw ''
        nix/tests.nix: FAILED ${case.name}
          got:  ${builtins.toJSON case.got}
          want: ${builtins.toJSON case.want}'';

  runAll = cases: builtins.foldl' (ok: c: ok && check c) true cases;

  store = "/nix/store/00000000000000000000000000000000";
  vulkanLoader = "${store}-vulkan-loader-1.4.313/lib/libvulkan.so.1";
  eglLib = "${store}-libglvnd-1.7.0/lib/libEGL.so.1";

  # What the module passes for a typical node (see example-configuration.nix).
  base = {
    inherit vulkanLoader eglLib;
  };

  baseArgs = [
    "up"
    "--config=/etc/nodeprep/config.yaml"
    "--vulkan-loader=${vulkanLoader}"
    "--egl-lib=${eglLib}"
    "--nvml-lib=/run/opengl-driver/lib/libnvidia-ml.so.1"
    "--cuda-lib=/run/opengl-driver/lib/libcuda.so.1"
  ];

  # health gets up's arguments for the same node, after its own name.
  healthBaseArgs = [ "health" ] ++ builtins.tail baseArgs;

  yamlCases = [
    {
      name = "toYAML: scalars are JSON-quoted, keys sorted, nesting indented";
      got = lib.toYAML {
        b = "x: #y";
        a = {
          n = 1;
          t = true;
          z = null;
          f = 1.5;
        };
      };
      want = ''
        a:
          f: 1.5
          n: 1
          t: true
          z: null
        b: "x: #y"
      '';
    }
    {
      name = "toYAML: lists, lists of mappings, nested lists, empty collections";
      got = lib.toYAML {
        l = [
          "a"
          {
            k = 1;
            m = [ 2 ];
          }
          [ "n" ]
        ];
        e = { };
        el = [ ];
      };
      want = ''
        e: {}
        el: []
        l:
          - "a"
          - k: 1
            m:
              - 2
          - - "n"
      '';
    }
    {
      name = "toYAML: strings YAML would reinterpret stay strings; odd keys are quoted";
      got = lib.toYAML {
        "a key" = "yes";
        mode = "0755";
        s = "line\n\"q\"";
      };
      want = ''
        "a key": "yes"
        mode: "0755"
        s: "line\n\"q\""
      '';
    }
    {
      name = "toYAML: host paths are written as strings, not copied to the store";
      got = lib.toYAML { p = /etc/nodeprep; };
      want = ''
        p: "/etc/nodeprep"
      '';
    }
    {
      name = "renderConfig: defaults";
      got = lib.renderConfig { };
      want = ''
        # Written by the NixOS module services.nodeprep; change services.nodeprep.* instead.
        # JSON-quoted scalars are plain YAML double-quoted strings.
        join:
          defaultTaint: false
          k3sArgs:
            - "agent"
          labels: []
          taints:
            - "nvidia.com/gpu=present:NoSchedule"
        nvml:
          library: "/run/opengl-driver/lib/libnvidia-ml.so.1"
        selftest:
          cudaLib: "/run/opengl-driver/lib/libcuda.so.1"
        up:
          onSelftestFailure: "block"
      '';
    }
    {
      name = "mkConfig: typed options laid over settings, settings kept";
      got = lib.mkConfig {
        settings = {
          cdi.deviceNames = [
            "uuid"
            "index"
          ];
          join.gfdLabels = false;
          selftest.timeout = "45s";
          wait = "30s";
        };
        taints = [
          "nvidia.com/gpu=present:NoSchedule"
          "dedicated=render:NoSchedule"
        ];
        labels = [ "pool=render" ];
        onSelftestFailure = "taint";
        k3sConfigPath = "/etc/k3s/agent.yaml";
        k3sEnvironmentFile = "/run/secrets/k3s.env";
        inherit vulkanLoader eglLib;
        glvndDir = "${store}-libglvnd-1.7.0/lib";
      };
      want = {
        cdi.deviceNames = [
          "uuid"
          "index"
        ];
        cdi.glvndDirs = [ "${store}-libglvnd-1.7.0/lib" ];
        nvml.library = "/run/opengl-driver/lib/libnvidia-ml.so.1";
        selftest.cudaLib = "/run/opengl-driver/lib/libcuda.so.1";
        selftest.vulkanLoader = vulkanLoader;
        selftest.eglLib = eglLib;
        join = {
          gfdLabels = false;
          taints = [
            "nvidia.com/gpu=present:NoSchedule"
            "dedicated=render:NoSchedule"
          ];
          labels = [ "pool=render" ];
          defaultTaint = false;
          k3sConfig = "/etc/k3s/agent.yaml";
          k3sEnvironmentFile = "/run/secrets/k3s.env";
          # services.k3s.configPath, as the unit passes it.
          k3sArgs = [
            "agent"
            "--config"
            "/etc/k3s/agent.yaml"
          ];
        };
        selftest.timeout = "45s";
        up.onSelftestFailure = "taint";
        wait = "30s";
      };
    }
    {
      name = "mkConfig: an empty taint list means no taint at all";
      got = (lib.mkConfig { taints = [ ]; }).join;
      want = {
        taints = [ ];
        labels = [ ];
        defaultTaint = false;
        k3sArgs = [ "agent" ];
      };
    }
    {
      name = "conflicts: settings keys owned by typed options";
      got = lib.conflicts {
        settings = {
          join.taints = [ "a=b:NoSchedule" ];
          join.gfdLabels = false;
          up.onSelftestFailure = "taint";
          up.metricsFile = "/x/n.prom";
        };
        metricsTextfileDir = "/var/lib/node-exporter";
      };
      want = [
        "join.taints"
        "up.onSelftestFailure"
        "up.metricsFile"
      ];
    }
    {
      name = "conflicts: join.k3sEnvironmentFile is owned once services.k3s.environmentFile is set";
      got = lib.conflicts {
        k3sEnvironmentFile = "/run/secrets/k3s.env";
        settings.join.k3sEnvironmentFile = "/etc/other.env";
      };
      want = [ "join.k3sEnvironmentFile" ];
    }
    {
      name = "conflicts: none for free settings";
      got = lib.conflicts {
        settings = {
          up.metricsFile = "/x/n.prom";
          join.gfdLabels = false;
        };
      };
      want = [ ];
    }
  ];

  argCases = [
    {
      name = "execArgs: without metrics or k3s flags: the agent the k3s unit runs";
      got = lib.execArgs base;
      want = baseArgs ++ [ "--k3s-arg=agent" ];
    }
    {
      name = "execArgs: with a metrics textfile directory";
      got = lib.execArgs (base // { metricsTextfileDir = "/var/lib/prometheus-node-exporter/textfile"; });
      want = baseArgs ++ [
        "--metrics-file=/var/lib/prometheus-node-exporter/textfile/nodeprep.prom"
        "--k3s-arg=agent"
      ];
    }
    {
      name = "execArgs: the k3s unit's arguments (nodeLabel, nodeTaint, then extraFlags split as systemd splits them); secrets dropped";
      got = lib.execArgs (
        base
        // {
          k3sExtraFlags = [
            "--node-label zone=a"
            "--token s3cret"
            "--node-taint=x=y:NoExecute"
            "--disable traefik"
            "-node-label"
            "rack=4"
          ];
          k3sNodeLabels = [ "pool=gpu" ];
          k3sNodeTaints = [ "t=1:NoSchedule" ];
        }
      );
      want = baseArgs ++ [
        "--k3s-arg=agent"
        "--k3s-arg=--node-label=pool=gpu"
        "--k3s-arg=--node-taint=t=1:NoSchedule"
        "--k3s-arg=--node-label"
        "--k3s-arg=zone=a"
        "--k3s-arg=--node-taint=x=y:NoExecute"
        "--k3s-arg=--disable"
        "--k3s-arg=traefik"
        "--k3s-arg=-node-label"
        "--k3s-arg=rack=4"
      ];
    }
    {
      name = "mkConfig: the k3s arguments go to join.k3sArgs, so health and cdi check judge the k3s up does";
      got = (lib.mkConfig {
        k3sRole = "server";
        k3sExtraFlags = [ "--data-dir=/data/k3s" "--token s3cret" ];
      }).join.k3sArgs;
      want = [ "server" "--data-dir=/data/k3s" ];
    }
    {
      name = "mkConfig: no k3s options: join.k3sArgs is the agent the unit runs";
      got = (lib.mkConfig { }).join.k3sArgs;
      want = [ "agent" ];
    }
    {
      name = "execArgs: k3s extraFlags as one string";
      got = lib.execArgs (
        base // { k3sExtraFlags = "--server https://k:6443  --node-label=a=b\n--node-taint c=d:NoSchedule"; }
      );
      want = baseArgs ++ [
        "--k3s-arg=agent"
        "--k3s-arg=--server"
        "--k3s-arg=https://k:6443"
        "--k3s-arg=--node-label=a=b"
        "--k3s-arg=--node-taint"
        "--k3s-arg=c=d:NoSchedule"
      ];
    }
    {
      name = "execArgs: a k3s server: the subcommand comes first (k3s server skips keys it does not define)";
      got = lib.execArgs (
        base
        // {
          k3sRole = "server";
          k3sNodeTaints = [ "t=1:NoSchedule" ];
        }
      );
      want = baseArgs ++ [
        "--k3s-arg=server"
        "--k3s-arg=--node-taint=t=1:NoSchedule"
      ];
    }
    {
      name = "execArgs: settings that name the libraries win over the flags; extraArgs last";
      got = lib.execArgs (
        base
        // {
          settings = {
            selftest.vulkanLoader = "/opt/libvulkan.so.1";
            selftest.cudaLib = "/opt/libcuda.so.1";
            nvml.library = "/opt/libnvidia-ml.so.1";
          };
          extraArgs = [ "-v" ];
        }
      );
      want = [
        "up"
        "--config=/etc/nodeprep/config.yaml"
        "--egl-lib=${eglLib}"
        "--k3s-arg=agent"
        "-v"
      ];
    }
    {
      name = "escapeSystemdExecArgs: quoted, % and $ doubled";
      got = lib.escapeSystemdExecArgs [
        "/bin/nodeprep"
        "--k3s-arg=--node-label=a=b c"
        "100%$HOME"
      ];
      want = ''"/bin/nodeprep" "--k3s-arg=--node-label=a=b c" "100%%$$HOME"'';
    }
  ];

  k3sCases = [
    {
      # k3s appends command-line node labels and taints to the files' (its
      # docs say they replace them; its code appends): only a label with one
      # of nodeprep's keys (the command line wins) and a taint with the key
      # and effect of one of nodeprep's (the node would not register) conflict.
      name = "k3sNodeArgConflicts: node labels/taints on the k3s command line";
      got = lib.k3sNodeArgConflicts {
        k3sExtraFlags = "--disable traefik --node-taint a=b:NoSchedule --node-taint nvidia.com/gpu:NoSchedule";
        k3sNodeLabels = [
          "x=y"
          "site=cpu"
          "pool=gpu"
        ];
        labels = [
          "site=gpu"
          "pool=gpu"
        ];
      };
      want = [
        "--node-label=site=cpu"
        "--node-taint=nvidia.com/gpu:NoSchedule"
      ];
    }
    {
      name = "k3sNodeArgConflicts: none without them; join.allowOverride lets labels through, not taints";
      got = [
        (lib.k3sNodeArgConflicts { k3sExtraFlags = [ "--disable traefik" ]; })
        (lib.k3sNodeArgConflicts {
          k3sNodeLabels = [ "x=y" ];
          k3sNodeTaints = [ "t:NoSchedule" ];
        })
        (lib.k3sNodeArgConflicts {
          k3sNodeLabels = [ "site=cpu" ];
          k3sNodeTaints = [ "nvidia.com/gpu=present:NoSchedule" ];
          labels = [ "site=gpu" ];
          settings.join.allowOverride = true;
        })
      ];
      want = [
        [ ]
        [ ]
        [ "--node-taint=nvidia.com/gpu=present:NoSchedule" ]
      ];
    }
  ];

  pathCases = [
    {
      name = "readWritePaths: defaults";
      got = lib.readWritePaths { };
      want = [
        "/run/cdi"
        "/etc/rancher/k3s/config.yaml.d"
        "/run/nodeprep"
      ];
    }
    {
      name = "readWritePaths: with metrics";
      got = lib.readWritePaths { metricsTextfileDir = "/var/lib/prometheus-node-exporter/textfile"; };
      want = [
        "/run/cdi"
        "/etc/rancher/k3s/config.yaml.d"
        "/run/nodeprep"
        "/var/lib/prometheus-node-exporter/textfile"
      ];
    }
    {
      name = "readWritePaths: follows a custom spec, status file, k3s config path";
      got = lib.readWritePaths {
        settings = {
          cdi.spec = "/etc/cdi/nvidia.json";
          up.statusFile = "/var/lib/nodeprep/status.json";
          up.metricsFile = "/var/run/metrics/np.prom";
        };
        k3sConfigPath = "/etc/k3s/agent.yaml";
      };
      want = [
        "/etc/cdi"
        "/etc/k3s/agent.yaml.d"
        "/run/nodeprep"
        "/var/lib/nodeprep"
        "/run/metrics"
      ];
    }
    {
      name = "tmpfilesRules: every writable directory, the CDI one too";
      got = lib.tmpfilesRules { metricsTextfileDir = "/var/lib/prometheus-node-exporter/textfile"; };
      want = [
        "d /run/cdi 0755 root root -"
        "d /etc/rancher/k3s/config.yaml.d 0755 root root -"
        "d /run/nodeprep 0755 root root -"
        "d /var/lib/prometheus-node-exporter/textfile 0755 root root -"
      ];
    }

    {
      name = "tmpfilesRules: a spec under /etc/cdi gets its directory (else 226/NAMESPACE)";
      got = builtins.elem "d /etc/cdi 0755 root root -" (lib.tmpfilesRules { settings.cdi.spec = "/etc/cdi/nvidia.yaml"; });
      want = true;
    }
    {
      name = "readWritePaths: --config in services.k3s.extraFlags moves the drop-in directory";
      got = builtins.elemAt (lib.readWritePaths {
        k3sExtraFlags = "--disable traefik --config /srv/k3s.yaml";
      }) 1;
      want = "/srv/k3s.yaml.d";
    }
    {
      # The unit passes configPath's --config before extraFlags, and
      # nodeprep (nodeprep/k3s Locate) takes the first.
      name = "readWritePaths: with configPath and a --config in extraFlags, the unit's first --config (configPath's)";
      got = builtins.elemAt (lib.readWritePaths {
        k3sConfigPath = "/etc/k3s/first.yaml";
        k3sExtraFlags = "--disable traefik --config /srv/k3s.yaml";
      }) 1;
      want = "/etc/k3s/first.yaml.d";
    }
    {
      name = "k3sConfigOf: -c=, then configPath, then settings, then the default";
      got = [
        (lib.k3sConfigOf { k3sExtraFlags = [ "-c=/a.yaml" ]; })
        (lib.k3sConfigOf { k3sConfigPath = "/b.yaml"; })
        (lib.k3sConfigOf { settings.join.k3sConfig = "/c.yaml"; })
        (lib.k3sConfigOf { })
      ];
      want = [
        "/a.yaml"
        "/b.yaml"
        "/c.yaml"
        "/etc/rancher/k3s/config.yaml"
      ];
    }
  ];

  k3sPathCases = [
    {
      name = "execArgs: --config, --data-dir/-d, --kubelet-arg and --container-runtime-endpoint are forwarded, the token is not";
      got = lib.execArgs (
        base
        // {
          k3sExtraFlags = "--token s3cret --config /srv/k3s.yaml -d /data/k3s --kubelet-arg=max-pods=250 --container-runtime-endpoint unix:///run/containerd/containerd.sock";
        }
      );
      want = baseArgs ++ [
        "--k3s-arg=agent"
        "--k3s-arg=--config"
        "--k3s-arg=/srv/k3s.yaml"
        "--k3s-arg=-d"
        "--k3s-arg=/data/k3s"
        "--k3s-arg=--kubelet-arg=max-pods=250"
        "--k3s-arg=--container-runtime-endpoint"
        "--k3s-arg=unix:///run/containerd/containerd.sock"
      ];
    }
    {
      name = "kubeletArgConflicts: register-with-taints (plain or +=) and a plain node-labels";
      got = lib.kubeletArgConflicts {
        k3sExtraFlags = [
          "--kubelet-arg=register-with-taints=node.cilium.io/agent-not-ready=true:NoExecute"
          "--kubelet-arg register-with-taints+=a=b:NoSchedule"
          "--kubelet-arg=register-with-taints-=c:NoSchedule"
          "--kubelet-arg=node-labels=x=y"
          "--kubelet-arg=node-labels+=z=w"
          "--kubelet-arg=max-pods=250"
        ];
      };
      want = [
        "--kubelet-arg=register-with-taints=node.cilium.io/agent-not-ready=true:NoExecute"
        "--kubelet-arg=register-with-taints+=a=b:NoSchedule"
        "--kubelet-arg=node-labels=x=y"
      ];
    }
    {
      name = "kubeletArgConflicts: none without taints for register-with-taints, none with join.allowOverride";
      got = [
        (lib.kubeletArgConflicts {
          taints = [ ];
          k3sExtraFlags = "--kubelet-arg=register-with-taints=a:NoSchedule";
        })
        (lib.kubeletArgConflicts {
          settings.join.allowOverride = true;
          k3sExtraFlags = "--kubelet-arg=node-labels=x=y";
        })
      ];
      want = [
        [ ]
        [ ]
      ];
    }
  ];

  entryCases = [
    {
      name = "entryProblems: good labels and taints pass";
      got = lib.entryProblems {
        labels = [
          "pool=render"
          "node.kubernetes.io/role=gpu"
          "kubernetes.io/arch=amd64"
          "example.com/empty="
        ];
        taints = [
          "nvidia.com/gpu=present:NoSchedule"
          "dedicated:NoExecute"
          "node-role.kubernetes.io/control-plane:NoSchedule"
          "k=:PreferNoSchedule"
        ];
      };
      want = [ ];
    }
    {
      name = "entryProblems: F11 (kubelet self-label rule, bad effect), bad keys and values";
      got = map (p: builtins.head (builtins.match "([^:]*\"[^\"]*\"): .*" p)) (lib.entryProblems {
        labels = [
          "node-role.kubernetes.io/gpu=true"
          "no-equals"
          "a/b/c=1"
          "Upper.Case/x=1"
          "x=bad value"
        ];
        taints = [ "nvidia.com/gpu=present:NoScheduled" "nokey" "-x:NoSchedule" ];
        k3sNodeLabels = [ "k8s.io/x=1" ];
      });
      want = [
        "label \"node-role.kubernetes.io/gpu=true\""
        "label \"no-equals\""
        "label \"a/b/c=1\""
        "label \"Upper.Case/x=1\""
        "label \"x=bad value\""
        "label \"k8s.io/x=1\""
        "taint \"nvidia.com/gpu=present:NoScheduled\""
        "taint \"nokey\""
        "taint \"-x:NoSchedule\""
      ];
    }
    {
      name = "labelProblems: the message names the kubelet's rule";
      got = builtins.length (builtins.filter (p: builtins.match ".*kubelet may not set labels.*" p != null) (lib.labelProblems "node-role.kubernetes.io/gpu=true"));
      want = 1;
    }
    {
      name = "taintProblems: a 64-character key name is too long";
      got = builtins.length (lib.taintProblems "${builtins.concatStringsSep "" (builtins.genList (_: "a") 64)}:NoSchedule");
      want = 1;
    }
  ];

  # --- nodeprep health (services.nodeprep.health) ---
  healthCases = [
    {
      name = "healthExecArgs: health with up's config and libraries, no k3s args or extraArgs";
      got = lib.healthExecArgs (
        base
        // {
          nvmlLib = "/run/opengl-driver/lib/libnvidia-ml.so.1";
          metricsTextfileDir = "/var/lib/prometheus-node-exporter/textfile";
          extraArgs = [ "--on-selftest-failure=taint" ];
          k3sExtraFlags = [ "--node-label=site=lab" ];
        }
      );
      want = healthBaseArgs ++ [ "--metrics-file=/var/lib/prometheus-node-exporter/textfile/nodeprep.prom" ];
    }
    {
      name = "healthExecArgs: the kubelet's kubeconfig for the Node report, or no report";
      got = [
        (lib.healthExecArgs (base // { nodeKubeconfig = "/var/lib/rancher/k3s/agent/kubelet.kubeconfig"; }))
        (lib.healthExecArgs (base // { nodeReport = false; nodeKubeconfig = "/x"; }))
      ];
      want = [
        (healthBaseArgs ++ [ "--kubeconfig=/var/lib/rancher/k3s/agent/kubelet.kubeconfig" ])
        (healthBaseArgs ++ [ "--no-node-report" ])
      ];
    }
    {
      name = "healthReadWritePaths: the lock, status and metrics directories and the CDI spec directories it re-patches";
      got = lib.healthReadWritePaths {
        settings.up.statusFile = "/var/lib/nodeprep/status.json";
        metricsTextfileDir = "/var/run/metrics";
      };
      want = [
        "/run/nodeprep"
        "/var/lib/nodeprep"
        "/run/metrics"
        "-/etc/cdi"
        "-/run/cdi"
      ];
    }
  ];

  # --- nodeprep cdi patch on write (the path unit) ---
  patchCases = [
    {
      name = "cdiWatchDirs: containerd's default directories and the spec's, /var/run as /run";
      got = lib.cdiWatchDirs { };
      want = [
        "/etc/cdi"
        "/run/cdi"
      ];
    }
    {
      name = "cdiWatchDirs: cdi.specDirs and a spec outside them";
      got = lib.cdiWatchDirs {
        settings.cdi.specDirs = [ "/etc/cdi" "/var/lib/cdi" ];
        settings.cdi.spec = "/var/run/nvidia/cdi/nvidia.json";
      };
      want = [
        "/etc/cdi"
        "/var/lib/cdi"
        "/run/nvidia/cdi"
      ];
    }
    {
      name = "patchExecArgs: cdi patch, quiet when unchanged, waits for the lock, keeps the metrics";
      got = lib.patchExecArgs (base // { metricsTextfileDir = "/var/lib/prometheus-node-exporter/textfile"; });
      want = [
        "cdi"
        "patch"
        "--config=/etc/nodeprep/config.yaml"
        "--changes-only"
        "--wait=30s"
        "--metrics-file=/var/lib/prometheus-node-exporter/textfile/nodeprep.prom"
      ];
    }
    {
      name = "patchReadWritePaths: lock, status, metrics, and the watched directories if they exist";
      got = lib.patchReadWritePaths { metricsTextfileDir = "/var/run/metrics"; };
      want = [
        "/run/nodeprep"
        "/run/metrics"
        "-/etc/cdi"
        "-/run/cdi"
      ];
    }
  ];

  # --- the k3s unit's arguments (issue 31) ---
  unitWith = u: {
    role = "agent";
    serverAddr = "";
    configPath = null;
    disable = [ ];
    nodeName = null;
    nodeLabel = [ ];
    nodeTaint = [ ];
    nodeIP = null;
    nodeExternalIP = null;
    selinux = false;
    kubeletConfigFile = null;
    kubeProxyConfigFile = null;
    clusterInit = false;
    disableAgent = false;
    extraFlags = [ ];
  } // u;
  kubeletFile = "${store}-k3s-kubelet-config";
  unitCases = [
    {
      name = "execWords: systemd's splitting: continued lines, quotes removed, backslash escapes";
      got = lib.execWords "/bin/k3s agent \\\n --server https://a:6443 \\\n --kubelet-arg=\"node-ip=::\" --a='b c' x\\ y \"q\\\"r\"";
      want = [
        "/bin/k3s"
        "agent"
        "--server"
        "https://a:6443"
        "--kubelet-arg=node-ip=::"
        "--a=b c"
        "x y"
        "q\"r"
      ];
    }
    {
      # nixos/modules/services/cluster/rancher/default.nix ExecStart order.
      name = "k3sArgsOfUnit: every option the unit passes, in its order; tokens never";
      got = lib.k3sArgsOfUnit (unitWith {
        role = "server";
        serverAddr = "https://k:6443";
        configPath = "/etc/k3s/c.yaml";
        disable = [ "traefik" "servicelb" ];
        nodeName = "gpu-01";
        nodeLabel = [ "a=b" ];
        nodeTaint = [ "t=1:NoSchedule" ];
        nodeIP = "10.0.0.5";
        nodeExternalIP = "203.0.113.5";
        selinux = true;
        kubeletConfigFile = kubeletFile;
        kubeProxyConfigFile = "${store}-k3s-kubeProxy-config";
        clusterInit = true;
        extraFlags = [
          "--token s3cret"
          "--agent-token=s3cret"
          "-t s3cret"
          "--vpn-auth-file /run/vpn"
          "--cluster-cidr=\"10.42.0.0/16\""
        ];
      });
      want = [
        "server"
        "--server"
        "https://k:6443"
        "--config"
        "/etc/k3s/c.yaml"
        "--disable=traefik"
        "--disable=servicelb"
        "--node-name=gpu-01"
        "--node-label=a=b"
        "--node-taint=t=1:NoSchedule"
        "--node-ip=10.0.0.5"
        "--node-external-ip=203.0.113.5"
        "--selinux"
        "--kubelet-arg=config=${kubeletFile}"
        "--kube-proxy-arg=config=${store}-k3s-kubeProxy-config"
        "--cluster-init"
        "--cluster-cidr=10.42.0.0/16"
      ];
    }
    {
      name = "k3sArgsOfUnit: extraFlags as one string or nested lists, as lib.flatten and systemd take them";
      got = [
        (lib.k3sArgsOfUnit (unitWith { extraFlags = "--node-label a=b\n--token-file=/run/t --debug"; }))
        (lib.k3sArgsOfUnit (unitWith { extraFlags = [ [ "--debug" ] "--node-ip 1.2.3.4" ]; }))
      ];
      want = [
        [ "agent" "--node-label" "a=b" "--debug" ]
        [ "agent" "--debug" "--node-ip" "1.2.3.4" ]
      ];
    }
    {
      name = "k3sUnitOf: options read with their defaults where a nixpkgs lacks them; the config files from the unit's ExecStart";
      got = [
        (lib.k3sUnitOf { extraFlags = [ ]; } null)
        (lib.k3sUnitOf {
          nodeName = "n";
          nodeIP = "10.0.0.5";
          disable = [ "traefik" ];
          gracefulNodeShutdown = {
            enable = true;
            shutdownGracePeriod = "1m";
            shutdownGracePeriodCriticalPods = "20s";
          };
          extraKubeletConfig.maxPods = 250;
          extraKubeProxyConfig.mode = "nftables";
        } "/k3s/bin/k3s agent \\\n --node-name=n \\\n --kubelet-arg=config=${kubeletFile} \\\n --kube-proxy-arg=config=/p \\\n --kubelet-arg=config=/user")
      ];
      want = [
        {
          serverAddr = "";
          disable = [ ];
          nodeName = null;
          nodeIP = null;
          nodeExternalIP = null;
          selinux = false;
          clusterInit = false;
          disableAgent = false;
          kubeletConfigFile = null;
          kubeProxyConfigFile = null;
          kubeletConfig = null;
        }
        {
          serverAddr = "";
          disable = [ "traefik" ];
          nodeName = "n";
          nodeIP = "10.0.0.5";
          nodeExternalIP = null;
          selinux = false;
          clusterInit = false;
          disableAgent = false;
          kubeletConfigFile = kubeletFile;
          kubeProxyConfigFile = "/p";
          kubeletConfig = {
            apiVersion = "kubelet.config.k8s.io/v1beta1";
            kind = "KubeletConfiguration";
            shutdownGracePeriod = "1m";
            shutdownGracePeriodCriticalPods = "20s";
            maxPods = 250;
          };
        }
      ];
    }
    {
      name = "execArgs: the unit's nodeName, nodeIP, disable and kubelet config reach nodeprep (they used to give no --k3s-arg)";
      got = lib.execArgs (
        base
        // {
          k3sRole = "server";
          k3sUnit = {
            nodeName = "gpu-01";
            nodeIP = "10.0.0.5";
            disable = [ "traefik" ];
            kubeletConfigFile = kubeletFile;
          };
        }
      );
      want = baseArgs ++ [
        "--k3s-arg=server"
        "--k3s-arg=--disable=traefik"
        "--k3s-arg=--node-name=gpu-01"
        "--k3s-arg=--node-ip=10.0.0.5"
        "--k3s-arg=--kubelet-arg=config=${kubeletFile}"
      ];
    }
    {
      name = "k3sDataDirOf: the last --data-dir/-d the unit passes, else /var/lib/rancher/k3s";
      got = [
        (lib.k3sDataDirOf { })
        (lib.k3sDataDirOf { k3sExtraFlags = "--data-dir /a -d=/b"; })
        (lib.k3sDataDirOf { k3sExtraFlags = [ "--data-dir=/data/k3s" ]; })
      ];
      want = [
        "/var/lib/rancher/k3s"
        "/b"
        "/data/k3s"
      ];
    }
    {
      name = "mkConfig: the k3s unit's PATH directories go to join.k3sUnitPath";
      got = (lib.mkConfig { k3sUnitPath = [ "${store}-nvidia-container-toolkit-1.17.8-tools/bin" "/run/wrappers/bin" ]; }).join.k3sUnitPath;
      want = [
        "${store}-nvidia-container-toolkit-1.17.8-tools/bin"
        "/run/wrappers/bin"
      ];
    }
    {
      name = "unitPathOf: each package's bin, then each one's sbin (nixos/lib/systemd-lib.nix)";
      got = lib.unitPathOf (p: p.bin or p) [
        { bin = "/s/a-bin"; }
        "/s/b"
      ];
      want = [
        "/s/a-bin/bin"
        "/s/b/bin"
        "/s/a-bin/sbin"
        "/s/b/sbin"
      ];
    }
  ];

  # --- the Go builder (issue 31): a throw alias must not break evaluation ---
  goPkg = v: { version = v; };
  builder = n: { builderName = n; };
  # pkgs/top-level/aliases.nix leaves removed Go versions as throws.
  removed = n: throw "'${n}' has been removed";
  chosen = pkgs: let c = lib.chooseGo pkgs; in if c == null then null else c.name;
  goCases = [
    {
      name = "chooseGo: nixpkgs' default builder when its Go is new enough";
      got = chosen {
        go = goPkg "1.26.1";
        buildGoModule = builder "default";
        buildGo126Module = removed "buildGo126Module";
        go_1_26 = removed "go_1_26";
      };
      want = "buildGoModule";
    }
    {
      name = "chooseGo: an older default Go and buildGo126Module a throw alias: the newest versioned builder that evaluates";
      got = chosen {
        go = goPkg "1.25.5";
        buildGoModule = builder "default";
        buildGo126Module = removed "buildGo126Module";
        go_1_26 = removed "go_1_26";
        buildGo127Module = builder "127";
        go_1_27 = goPkg "1.27.0";
      };
      want = "buildGo127Module";
    }
    {
      name = "chooseGo: buildGo126Module when it is there (release-25.11 after nixpkgs PR 490463)";
      got = chosen {
        go = goPkg "1.25.5";
        buildGoModule = builder "default";
        buildGo126Module = builder "126";
        go_1_26 = goPkg "1.26.0";
        buildGo127Module = removed "buildGo127Module";
        go_1_27 = removed "go_1_27";
      };
      want = "buildGo126Module";
    }
    {
      name = "chooseGo: none new enough: null, and goBuilderOf stops with a message naming Go and the way out";
      got = [
        (chosen {
          go = goPkg "1.24.9";
          buildGoModule = builder "default";
          buildGo126Module = removed "buildGo126Module";
          go_1_26 = removed "go_1_26";
          buildGo125Module = builder "125";
          go_1_25 = goPkg "1.25.5";
        })
        (builtins.tryEval (lib.goBuilderOf { go = goPkg "1.24.9"; buildGoModule = builder "default"; }).builder).success
        (builtins.match ".*needs Go >= ${lib.goMinimum} \\(go.mod\\), but this nixpkgs' default Go is 1.24.9.*release-25.11.*services.nodeprep.package.*" (lib.noGoMessage { go = goPkg "1.24.9"; }) != null)
      ];
      want = [
        null
        false
        true
      ];
    }
    {
      name = "goMinimum: go.mod's go directive";
      got = builtins.match "[0-9]+[.][0-9]+" lib.goMinimum != null
        && builtins.match ".*\ngo ${builtins.replaceStrings [ "." ] [ "[.]" ] lib.goMinimum}[.0-9]*\n.*" (builtins.readFile ../go.mod) != null;
      want = true;
    }
  ];
in
runAll (yamlCases ++ argCases ++ k3sCases ++ pathCases ++ k3sPathCases ++ entryCases ++ healthCases ++ patchCases ++ unitCases ++ goCases)
