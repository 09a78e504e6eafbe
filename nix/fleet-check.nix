# The flake's lib.mkChecks: one check derivation per GPU node configuration
# of a user's flake (those with services.nodeprep.enable), each judged by
# nodeprep in the build sandbox, without a GPU and without network:
#
#   checks.x86_64-linux = nodeprep.lib.mkChecks {
#     pkgs = nixpkgs.legacyPackages.x86_64-linux;
#     inherit (self) nixosConfigurations;
#     manifests = ./k8s;            # optional: the cluster's manifests
#   };
#
# Each check gathers the configuration's facts (nix/facts.nix: nodeprep's
# config and unit, the k3s unit's arguments, PATH, config files and
# manifests, the toolkit's generator arguments, the driver package), writes
# them to facts.json and runs
#
#   nodeprep-cluster cluster check-node --facts facts.json [--manifests DIR]...
#
# which assembles a host tree from them and judges it (docs/nixos.md, "In
# your fleet's CI"). A check fails with nodeprep's findings, naming the node
# configuration; a passing one leaves the report and the facts in $out.
#
# `nodeprepFor pkgs` is the nodeprep package the flake builds for pkgs'
# system (the default of the `nodeprep` argument).
{ nodeprepFor }:
{
  pkgs,
  nixosConfigurations,
  # a directory of Kubernetes manifests, or a list of them, or null
  manifests ? null,
  # the simulated inventory nodeprep judges each node against
  simulate ? "dgx-h200",
  nodeprep ? nodeprepFor pkgs,
}:
let
  inherit (pkgs) lib;
  system = pkgs.stdenv.hostPlatform.system;

  # GPU nodes of this system: a node of another system is that system's
  # check (its driver and toolkit are built for it).
  gpuNodes = lib.filterAttrs (
    _: sys:
    (sys.config.services.nodeprep.enable or false)
    && (sys.pkgs.stdenv.hostPlatform.system or system) == system
  ) nixosConfigurations;

  manifestDirs =
    if manifests == null then
      [ ]
    else if builtins.isList manifests then
      manifests
    else
      [ manifests ];
  manifestArgs = lib.concatMapStringsSep " " (d: "--manifests ${lib.escapeShellArg "${d}"}") manifestDirs;

  check =
    name: sys:
    let
      facts = import ./facts.nix {
        inherit lib name simulate;
        inherit (sys) config;
        pkgs = sys.pkgs or pkgs;
      };
      factsFile = pkgs.writeText "nodeprep-facts-${name}.json" (builtins.toJSON facts);
    in
    pkgs.runCommand "nodeprep-check-${name}"
      {
        nativeBuildInputs = [ nodeprep ];
        meta.description = "nodeprep's judgement of the NixOS configuration ${name}";
      }
      ''
        status=0
        nodeprep-cluster cluster check-node --facts ${factsFile} ${manifestArgs} >report.txt 2>&1 || status=$?
        cat report.txt
        case "$status" in
          0) ;;
          1)
            echo "nodeprep: nixosConfigurations.${name} would not make a ready GPU node (nodeprep-cluster cluster check-node exit 1); see above" >&2
            exit 1 ;;
          65)
            echo "nodeprep: nodeprep-cluster refused the facts of nixosConfigurations.${name} or the manifests (exit 65): not a finding about the node; see above (a nodeprep package older than the flake's nix/ refuses the fields it does not know)" >&2
            exit 1 ;;
          *)
            echo "nodeprep: nodeprep-cluster cluster check-node could not judge nixosConfigurations.${name} (exit $status); see above" >&2
            exit 1 ;;
        esac
        mkdir -p $out
        cp report.txt $out/report.txt
        cp ${factsFile} $out/facts.json
      '';
in
lib.mapAttrs' (name: sys: lib.nameValuePair "nodeprep-${name}" (check name sys)) gpuNodes
