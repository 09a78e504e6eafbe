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

      # go.mod says go 1.26: use that toolchain where nixpkgs' default is older.
      nodeprepFor =
        pkgs:
        pkgs.callPackage ./nix/package.nix {
          inherit version commit;
          buildGoModule = pkgs.buildGo126Module or pkgs.buildGoModule;
        };
    in
    {
      packages = forAllSystems (pkgs: rec {
        nodeprep = nodeprepFor pkgs;
        default = nodeprep;
      });

      overlays.default = final: _prev: { nodeprep = nodeprepFor final; };

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
            (pkgs.go_1_26 or go)
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
