# Evaluates nix/module.nix with the project's example configuration
# (nix/example-configuration.nix) and stand-ins for the nixpkgs it composes
# with (nix/stub/: the module system, systemd's unit options, the k3s and
# nvidia-container-toolkit modules, packages), without nixpkgs. Evaluates
# to `true`, or throws naming the first failing case:
#
#   nix-instantiate --eval --strict nix/module-stub-eval.nix
#
# and, with `--arg what '"facts"' --json`, to the facts nix/facts.nix
# gathers for the example (testdata/fleet/example-facts.json; see
# scripts/nix-check.sh --update).
#
# Run by scripts/nix-check.sh. The stand-ins follow the newest nixpkgs
# modules (see nix/stub/nixos.nix for the files and PRs), so what fails
# here because of an option name, a type or a unit's arguments fails in a
# real evaluation too; what only nixpkgs itself can prove (the real
# modules, store paths, building the unit files) is checks.<system>.module-eval
# (nix/module-eval.nix).
{
  what ? "check",
}:
let
  stub = import ./stub/nixos.nix;
  inherit (stub) lib pkgs;
  nplib = import ./lib.nix;

  # A NixOS system: the stand-ins, the module (with the package the flake's
  # nixosModules.default sets), the example, and `extra` modules.
  eval =
    extra:
    (lib.evalModules {
      specialArgs = { inherit pkgs; };
      modules =
        stub.modules
        ++ [
          ./module.nix
          ./example-configuration.nix
          { services.nodeprep.package = pkgs.nodeprep; }
        ]
        ++ extra;
    }).config;

  factsOf =
    config:
    import ./facts.nix {
      inherit lib pkgs config;
      name = "gpu-node-1";
    };

  failedAssertions = config: map (a: a.message) (builtins.filter (a: !a.assertion) config.assertions);

  c = eval [ ];
  facts = factsOf c;
  path = c.systemd.paths.nodeprep-cdi-patch;
  svc = c.systemd.services.nodeprep-cdi-patch;
  up = c.systemd.services.nodeprep;
  sc = svc.serviceConfig;
  tools = "${lib.getOutput "tools" pkgs.nvidia-container-toolkit}/bin";

  # The k3s arguments nodeprep gets (--k3s-arg=...), in order.
  k3sArgsOf =
    config:
    map (a: builtins.substring 10 (-1) a) (
      builtins.filter (lib.hasPrefix "--k3s-arg=") (nplib.execWords config.systemd.services.nodeprep.serviceConfig.ExecStart)
    );
  # The k3s unit's own arguments after the binary, less the secret flags.
  unitArgsOf =
    config:
    let
      ws = builtins.tail (nplib.execWords config.systemd.services.k3s.serviceConfig.ExecStart);
      secret = w: builtins.match "--(token|token-file|agent-token|agent-token-file)(=.*)?" w;
      drop =
        l:
        if l == [ ] then
          [ ]
        else if secret (builtins.head l) == null then
          [ (builtins.head l) ] ++ drop (builtins.tail l)
        else if builtins.elemAt (secret (builtins.head l)) 1 != null then
          drop (builtins.tail l)
        else
          drop (builtins.tail (builtins.tail l));
    in
    drop ws;

  # A k3s server with the options that used to give nodeprep no --k3s-arg
  # at all, secrets, a data-dir and a kubelet config.
  server = eval [
    {
      services.k3s = {
        role = lib.mkForce "server";
        serverAddr = lib.mkForce "";
        nodeName = "gpu-01";
        nodeIP = "10.0.0.5";
        disable = [ "traefik" ];
        selinux = true;
        token = "s3cret-token";
        agentTokenFile = "/run/secrets/agent-token";
        gracefulNodeShutdown.enable = true;
        extraKubeletConfig = {
          maxPods = 250;
          registerWithTaints = [
            {
              key = "dedicated";
              value = "gpu";
              effect = "NoSchedule";
            }
          ];
        };
        extraFlags = [
          "--cluster-cidr 10.42.0.0/16"
          "--token=also-s3cret"
        ];
        manifests.app.source = ../testdata/fleet/app-manifest.yaml;
      };
    }
  ];
  serverArgs = k3sArgsOf server;

  dataDirServer = eval [
    {
      services.k3s = {
        role = lib.mkForce "server";
        extraFlags = "--data-dir /data/k3s --write-kubeconfig-mode=0640";
      };
    }
  ];

  # Whether evaluating `v` deeply fails (as a real evaluation would).
  fails = v: !(builtins.tryEval (builtins.deepSeq v v)).success;

  cases = [
    {
      name = "the example evaluates with the k3s and toolkit stand-ins and no failed assertion";
      ok = failedAssertions c == [ ] && c.services.k3s.role == "agent";
    }
    # --- the toolkit on k3s's PATH, passed to nodeprep ---
    {
      name = "the k3s unit's PATH holds the toolkit's tools/bin (nvidia-container-runtime, .cdi) before systemd's defaults";
      ok =
        builtins.head c.systemd.services.k3s.path == lib.getOutput "tools" pkgs.nvidia-container-toolkit
        && lib.hasPrefix "${tools}:" c.systemd.services.k3s.environment.PATH;
    }
    {
      name = "config.yaml passes k3s's PATH directories as join.k3sUnitPath, the toolkit's first";
      ok =
        lib.hasInfix "  k3sUnitPath:\n    - \"${tools}\"\n" c.environment.etc."nodeprep/config.yaml".text
        && builtins.head facts.k3s.unitPath == tools
        && builtins.elem "${pkgs.coreutils}/bin" facts.k3s.unitPath
        && builtins.hasContext (builtins.head facts.k3s.unitPath);
    }
    {
      name = "services.nodeprep.k3s.toolkitOnPath = false leaves k3s's PATH alone";
      ok =
        let
          off = eval [ { services.nodeprep.k3s.toolkitOnPath = false; } ];
        in
        !(builtins.elem (lib.getOutput "tools" pkgs.nvidia-container-toolkit) off.systemd.services.k3s.path)
        && !(lib.hasInfix tools off.environment.etc."nodeprep/config.yaml".text);
    }
    # --- the k3s arguments: the unit's own, less its secrets ---
    {
      name = "nodeprep replays the example agent's unit arguments (role, --server), not its token file";
      ok =
        k3sArgsOf c == unitArgsOf c
        && k3sArgsOf c == [
          "agent"
          "--server"
          "https://k3s.example.internal:6443"
        ]
        && !(lib.hasInfix "token" up.serviceConfig.ExecStart);
    }
    {
      name = "nodeName, nodeIP, disable, selinux, the kubelet config and extraFlags reach nodeprep; no token does";
      ok =
        serverArgs == unitArgsOf server
        && builtins.head serverArgs == "server"
        && builtins.all (a: builtins.elem a serverArgs) [
          "--node-name=gpu-01"
          "--node-ip=10.0.0.5"
          "--disable=traefik"
          "--selinux"
          "--cluster-cidr"
          "10.42.0.0/16"
        ]
        && builtins.any (lib.hasPrefix "--kubelet-arg=config=/nix/store/") serverArgs
        && !(lib.hasInfix "s3cret" server.systemd.services.nodeprep.serviceConfig.ExecStart)
        && !(lib.hasInfix "token" server.systemd.services.nodeprep.serviceConfig.ExecStart)
        && lib.hasInfix "--token s3cret-token" server.systemd.services.k3s.serviceConfig.ExecStart;
    }
    {
      name = "the kubelet config file's KubeletConfiguration (graceful shutdown, extraKubeletConfig) is in the facts";
      ok =
        builtins.fromJSON (factsOf server).k3s.kubeletConfig == {
          apiVersion = "kubelet.config.k8s.io/v1beta1";
          kind = "KubeletConfiguration";
          shutdownGracePeriod = "30s";
          shutdownGracePeriodCriticalPods = "10s";
          maxPods = 250;
          registerWithTaints = [
            {
              key = "dedicated";
              value = "gpu";
              effect = "NoSchedule";
            }
          ];
        }
        && facts.k3s.kubeletConfig == null;
    }
    # --- the data-dir ---
    {
      name = "a --data-dir in extraFlags (a string) moves health's kubeconfig and the facts' dataDir";
      ok =
        lib.hasInfix "--kubeconfig=/data/k3s/agent/kubelet.kubeconfig" dataDirServer.systemd.services.nodeprep-health.serviceConfig.ExecStart
        && (factsOf dataDirServer).k3s.dataDir == "/data/k3s"
        && lib.hasInfix "--kubeconfig=/var/lib/rancher/k3s/agent/kubelet.kubeconfig" c.systemd.services.nodeprep-health.serviceConfig.ExecStart
        && facts.k3s.dataDir == "/var/lib/rancher/k3s";
    }
    # --- the nvidia-cdi RuntimeClass on a server ---
    {
      name = "a server gets the nvidia-cdi RuntimeClass as a services.k3s.manifests entry the k3s module links";
      ok =
        server.services.k3s.manifests.nodeprep-nvidia-cdi-runtimeclass.content == {
          apiVersion = "node.k8s.io/v1";
          kind = "RuntimeClass";
          metadata.name = "nvidia-cdi";
          handler = "nvidia-cdi";
        }
        && server.systemd.tmpfiles.settings."10-k3s" ? "/var/lib/rancher/k3s/server/manifests/nodeprep-nvidia-cdi-runtimeclass.yaml"
        && (factsOf server).k3s.autoDeployManifests ? "nodeprep-nvidia-cdi-runtimeclass.yaml"
        # A manifest from a file of the flake is in the facts as its text.
        && (factsOf server).k3s.autoDeployManifests."app.yaml" == builtins.readFile ../testdata/fleet/app-manifest.yaml;
    }
    {
      name = "with another data-dir the RuntimeClass is linked into <data-dir>/server/manifests by a tmpfiles rule";
      ok =
        !(dataDirServer.services.k3s.manifests ? nodeprep-nvidia-cdi-runtimeclass)
        && builtins.any (lib.hasPrefix "L+ /data/k3s/server/manifests/nodeprep-nvidia-cdi-runtimeclass.yaml - - - - /nix/store/") dataDirServer.systemd.tmpfiles.rules
        && (factsOf dataDirServer).k3s.autoDeployManifests ? "nodeprep-nvidia-cdi-runtimeclass.yaml";
    }
    {
      name = "an agent, or runtimeClass = false, deploys no RuntimeClass";
      ok =
        c.services.k3s.manifests == { }
        && facts.k3s.autoDeployManifests == { }
        && (eval [
          { services.k3s.role = lib.mkForce "server"; }
          { services.nodeprep.k3s.runtimeClass = false; }
        ]).services.k3s.manifests == { };
    }
    # --- the stand-ins refuse what the real modules refuse ---
    {
      name = "the stand-ins refuse an option the real modules lack and a value of the wrong type";
      ok =
        fails (eval [ { services.k3s.nodeLabels = [ "a=b" ]; } ]).services.k3s
        && fails (eval [ { hardware.nvidia-container-toolkit.device-name-strategy = "gpu-uuid"; } ]).hardware.nvidia-container-toolkit.device-name-strategy
        && fails (eval [ { services.k3s.extraFlags = 3; } ]).services.k3s.extraFlags;
    }
    # --- the facts ---
    {
      name = "the facts: schema, name, the module's config and unit, the driver and the generator's arguments";
      ok =
        facts.schema == "nodeprep.dev/node-facts/v1"
        && facts.name == "gpu-node-1"
        && facts.nodeprep.configYaml == c.environment.etc."nodeprep/config.yaml".text
        && facts.nodeprep.execStart == up.serviceConfig.ExecStart
        && facts.k3s.version == "1.33.4+k3s1"
        && facts.k3s.configPath == "/etc/rancher/k3s/config.yaml"
        && facts.driver.version == "580.95.05"
        && builtins.hasContext facts.driver.package
        && facts.toolkit.generatorArgs == [
          "--format"
          "json"
          "--discovery-mode"
          "auto"
          "--device-name-strategy"
          "uuid"
          "--disable-hook"
          "create-symlinks"
          "--ldconfig-path"
          (lib.getExe' pkgs.glibc "ldconfig")
          "--library-search-path"
          "${lib.getLib pkgs.nvidiaPackages.production}/lib"
          "--nvidia-cdi-hook-path"
          "${tools}/nvidia-cdi-hook"
        ]
        # The generator unit's script passes the same arguments.
        && lib.hasInfix (builtins.concatStringsSep " " facts.toolkit.generatorArgs) (
          builtins.unsafeDiscardStringContext (
            (pkgs.cdiGenerator {
              inherit (c.hardware.nvidia-container-toolkit)
                csv-files
                device-name-strategy
                discovery-mode
                mounts
                disable-hooks
                enable-hooks
                extraArgs
                ;
              nvidia-container-toolkit = c.hardware.nvidia-container-toolkit.package;
              nvidia-driver = c.hardware.nvidia.package;
            }).drvAttrs.text
          )
        );
    }
    {
      name = "the facts equal testdata/fleet/example-facts.json (scripts/nix-check.sh --update rewrites it)";
      ok = builtins.fromJSON (builtins.readFile ../testdata/fleet/example-facts.json) == builtins.fromJSON (builtins.unsafeDiscardStringContext (builtins.toJSON facts));
    }
    # --- lib.mkChecks (nix/fleet-check.nix) ---
    {
      name = "mkChecks: one check per GPU node of this system, running check-node on the facts nix/facts.nix gathers, a refusal of the facts not said to be the node's";
      ok =
        let
          checks = import ./fleet-check.nix { nodeprepFor = _: pkgs.nodeprep; } {
            inherit pkgs;
            nixosConfigurations = {
              gpu-node-1 = {
                config = c;
                inherit pkgs;
              };
              # Not a GPU node: no check.
              cpu-node = {
                config = eval [ { services.nodeprep.enable = lib.mkForce false; } ];
                inherit pkgs;
              };
              # Another system's node: its own system's check.
              arm-node = {
                config = c;
                pkgs = pkgs // {
                  stdenv.hostPlatform.system = "aarch64-linux";
                };
              };
            };
            manifests = "/srv/k8s";
          };
          chk = checks.nodeprep-gpu-node-1;
          factsFile = builtins.head (
            builtins.filter (w: lib.hasSuffix "-nodeprep-facts-gpu-node-1.json" w) (nplib.execWords chk.script)
          );
        in
        builtins.attrNames checks == [ "nodeprep-gpu-node-1" ]
        && lib.hasInfix "nodeprep-cluster cluster check-node --facts ${factsFile} --manifests '/srv/k8s' >report.txt" chk.script
        && lib.hasInfix "nixosConfigurations.gpu-node-1 would not make a ready GPU node" chk.script
        # A refusal of the facts (exit 65) is not said to be the node's fault.
        && lib.hasInfix "refused the facts of nixosConfigurations.gpu-node-1" chk.script
        && builtins.elem pkgs.nodeprep chk.drvAttrs.nativeBuildInputs
        # The facts file holds exactly the facts, and the check depends on it.
        && factsFile == "${pkgs.writeText "nodeprep-facts-gpu-node-1.json" (builtins.toJSON facts)}"
        && builtins.hasContext chk.script;
    }
    # --- the re-patch units (services.nodeprep.repatch) ---
    {
      name = "the path unit watches containerd's CDI spec directories (PathChanged=)";
      ok = path.pathConfig.PathChanged == [
        "/etc/cdi"
        "/run/cdi"
      ];
    }
    {
      name = "the path unit starts nodeprep-cdi-patch.service, from boot, after nodeprep.service";
      ok =
        path.pathConfig.Unit == "nodeprep-cdi-patch.service"
        && builtins.elem "multi-user.target" path.wantedBy
        && builtins.elem "nodeprep.service" path.after;
    }
    {
      name = "the service re-patches only a node up brought up (after + requisite nodeprep.service)";
      ok = builtins.elem "nodeprep.service" svc.after && builtins.elem "nodeprep.service" svc.requisite;
    }
    {
      name = "ExecStart is cdi patch --changes-only --wait=30s with the config and the metrics file";
      ok =
        sc.ExecStart
        == builtins.concatStringsSep " " (
          map builtins.toJSON [
            (lib.getExe pkgs.nodeprep)
            "cdi"
            "patch"
            "--config=/etc/nodeprep/config.yaml"
            "--changes-only"
            "--wait=30s"
            "--metrics-file=/var/lib/prometheus-node-exporter/textfile/nodeprep.prom"
          ]
        );
    }
    {
      name = "oneshot, never restarted (the next write runs it again)";
      ok = sc.Type == "oneshot" && sc.Restart == "no" && !(sc ? RestartSec) && !(sc ? RestartPreventExitStatus);
    }
    {
      name = "nodeprep.service's hardening, no GPU device, writes only lock, status, metrics and spec dirs";
      ok =
        sc.ProtectSystem == "strict"
        && sc.NoNewPrivileges
        && sc.PrivateNetwork
        && sc.CapabilityBoundingSet == up.serviceConfig.CapabilityBoundingSet
        && sc.DevicePolicy == "closed"
        && !(sc ? DeviceAllow)
        && sc.ReadWritePaths == [
          "/run/nodeprep"
          "/var/lib/prometheus-node-exporter/textfile"
          "-/etc/cdi"
          "-/run/cdi"
        ];
    }
    {
      name = "repatch.enable = false leaves both units out";
      ok =
        let
          off = eval [ { services.nodeprep.repatch.enable = false; } ];
        in
        !(off.systemd.paths ? nodeprep-cdi-patch) && !(off.systemd.services ? nodeprep-cdi-patch);
    }
  ];
  failed = builtins.filter (x: !x.ok) cases;
in
if what == "facts" then
  facts
else if failed == [ ] then
  builtins.all (x: x.ok) cases
else
  throw "nix/module-stub-eval.nix: FAILED ${(builtins.head failed).name}: got ${
    builtins.toJSON {
      assertions = failedAssertions c;
      k3sArgs = k3sArgsOf c;
      unitArgs = unitArgsOf c;
      serverArgs = serverArgs;
      serverUnitArgs = unitArgsOf server;
      unitPath = facts.k3s.unitPath;
    }
  }"
