{
  description = "nodeprep: turn a NixOS machine with NVIDIA GPUs into a k3s GPU node";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs =
    { self, nixpkgs }:
    let
      inherit (nixpkgs) lib;
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forAllSystems = f: lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});

      version = "0.1.0+${self.shortRev or self.dirtyShortRev or "dirty"}";
      commit = self.rev or self.dirtyRev or "";

      nplib = import ./nix/lib.nix;

      # go.mod's go directive is the oldest Go that builds nodeprep: nixpkgs'
      # buildGoModule when its Go is that new, else the newest
      # buildGo1NNModule that is (nix/lib.nix chooseGo: a Go that nixpkgs
      # removed is a throw alias, which `or` would not catch).
      nodeprepFor =
        pkgs:
        pkgs.callPackage ./nix/package.nix {
          inherit version commit;
          buildGoModule = (nplib.goBuilderOf pkgs).builder;
        };
    in
    {
      packages = forAllSystems (pkgs: rec {
        nodeprep = nodeprepFor pkgs;
        default = nodeprep;
      });

      overlays.default = final: _prev: { nodeprep = nodeprepFor final; };

      # Checks for a fleet's own node configurations (nix/fleet-check.nix,
      # docs/nixos.md "In your fleet's CI"):
      #   checks.x86_64-linux = nodeprep.lib.mkChecks {
      #     pkgs = nixpkgs.legacyPackages.x86_64-linux;
      #     inherit (self) nixosConfigurations;
      #     manifests = ./k8s;
      #   };
      lib.mkChecks = import ./nix/fleet-check.nix {
        nodeprepFor =
          pkgs: self.packages.${pkgs.stdenv.hostPlatform.system}.default or (nodeprepFor pkgs);
      };

      # The same for flake-parts: every perSystem gets the checks of
      # flake.nixosConfigurations (with nodeprep.fleetCheck.manifests).
      flakeModules.default =
        { config, lib, ... }:
        {
          options.nodeprep.fleetCheck.manifests = lib.mkOption {
            type = lib.types.nullOr lib.types.path;
            default = null;
            description = "A directory of Kubernetes manifests that each GPU node's check judges (cluster check).";
          };
          config.perSystem =
            { pkgs, ... }:
            {
              checks = self.lib.mkChecks {
                inherit pkgs;
                nixosConfigurations = config.flake.nixosConfigurations or { };
                inherit (config.nodeprep.fleetCheck) manifests;
              };
            };
        };

      # The module, with services.nodeprep.package defaulting to this
      # flake's build.
      nixosModules.default =
        { lib, pkgs, ... }:
        let
          system = pkgs.stdenv.hostPlatform.system;
        in
        {
          imports = [ ./nix/module.nix ];
          services.nodeprep.package = lib.mkIf (self.packages ? ${system}) (
            lib.mkDefault self.packages.${system}.default
          );
        };
      nixosModules.nodeprep = self.nixosModules.default;

      devShells = forAllSystems (pkgs: {
        default = pkgs.mkShell {
          packages = with pkgs; [
            (nplib.goBuilderOf pkgs).go
            gopls
            vulkan-headers
            libglvnd
            vulkan-loader
            vulkan-tools
            mesa
            glslang
            jq
            hyperfine
            runc
            nixfmt
          ];
          # Mesa's lavapipe and EGL stand in for the NVIDIA driver, as in
          # `make unit`.
          shellHook = ''
            export VK_DRIVER_FILES=${pkgs.mesa}/share/vulkan/icd.d/lvp_icd.${pkgs.stdenv.hostPlatform.uname.processor}.json
            export __EGL_VENDOR_LIBRARY_FILENAMES=${pkgs.mesa}/share/glvnd/egl_vendor.d/50_mesa.json
            export LD_LIBRARY_PATH=${
              lib.makeLibraryPath [
                pkgs.vulkan-loader
                pkgs.libglvnd
                pkgs.mesa
              ]
            }''${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
          '';
        };
      });

      # RFC-style nixfmt (the package formerly called nixfmt-rfc-style).
      formatter = forAllSystems (pkgs: pkgs.nixfmt);

      checks = forAllSystems (
        pkgs:
        let
          system = pkgs.stdenv.hostPlatform.system;
          nodeprep = self.packages.${system}.default;
        in
        {
          # Every Go test (`go test ./...`), with Mesa's lavapipe and EGL.
          go-tests = nodeprep.overrideAttrs (_: {
            pname = "nodeprep-go-tests";
            doCheck = true;
          });

          # The builtins-only tests of nix/lib.nix (also run without nixpkgs
          # by scripts/nix-check.sh).
          lib-tests =
            assert import ./nix/tests.nix;
            pkgs.runCommand "nodeprep-lib-tests" { } "touch $out";

          # A NixOS system with the module and the example configuration
          # evaluates, its assertions hold, and the unit is wired as
          # designed. The facts land in $out for inspection.
          module-eval = import ./nix/module-eval.nix {
            inherit pkgs;
            nixosSystem = lib.nixosSystem;
            modules = [
              self.nixosModules.default
              ./nix/example-configuration.nix
              { nixpkgs.hostPlatform = system; }
            ];
          };

          # `nodeprep up --simulate dgx-h200 --allow-cpu-adapter` in a VM,
          # with the unit's command line, against testdata/hosts/nixos-h200.
          vm = import ./nix/vm-test.nix { inherit pkgs nodeprep; };
        }
      );
    };
}
